"""The two error families: setup errors exit 2 with their message; infrastructure errors carry a drop reason."""

from __future__ import annotations

import inspect

import pytest

from qwen_swe import errors
from qwen_swe.errors import DropReason, InfraError, QwenSweError, SetupError
from qwen_swe.run import main


def test_a_bad_setting_exits_2_naming_the_variable(monkeypatch, capsys):
    monkeypatch.setenv("NUM_ROLLOUTS", "ten")
    assert main([]) == errors.SETUP_EXIT_CODE
    err = capsys.readouterr().err
    assert "NUM_ROLLOUTS='ten'" in err and "int" in err


def test_every_error_is_in_one_family_and_every_infra_error_has_a_reason():
    classes = [
        c
        for _, c in inspect.getmembers(errors, inspect.isclass)
        if issubclass(c, QwenSweError) and c not in (QwenSweError, SetupError, InfraError)
    ]
    assert len(classes) >= 10
    for cls in classes:
        assert issubclass(cls, QwenSweError)
        assert not (issubclass(cls, SetupError) and issubclass(cls, InfraError)), cls
        if issubclass(cls, InfraError):
            assert isinstance(cls.reason, DropReason), cls


def test_drop_reasons_are_distinct_metric_keys():
    values = [r.value for r in DropReason]
    assert len(values) == len(set(values))
    assert all(v.isidentifier() and v == v.lower() for v in values)


@pytest.mark.parametrize("cls", [errors.SandboxError, errors.InferenceError, errors.GradingError])
def test_infra_errors_are_not_setup_errors(cls):
    with pytest.raises(InfraError):
        raise cls("boom")


def test_the_run_entry_hands_eval_to_the_evaluation_entry(monkeypatch, capsys):
    monkeypatch.setenv("EVAL_SAMPLES", "zero")  # a bad evaluation setting: the evaluation entry's own message
    assert main(["--eval"]) == errors.SETUP_EXIT_CODE
    assert "qwen-swe evaluate: EVAL_SAMPLES='zero'" in capsys.readouterr().err
