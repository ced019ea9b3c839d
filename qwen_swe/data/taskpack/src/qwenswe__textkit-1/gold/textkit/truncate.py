"""Cut text down to a width."""


def truncate(text, width, placeholder="..."):
    """Return ``text`` cut to at most ``width`` characters, ending with ``placeholder`` when it was cut."""
    if width < len(placeholder):
        raise ValueError(f"width {width} is smaller than the placeholder {placeholder!r}")
    if len(text) <= width:
        return text
    keep = width - len(placeholder)
    return text[:keep] + placeholder


def shorten(text, width, placeholder="..."):
    """Like ``truncate``, but collapse whitespace first and never cut inside a word."""
    words = text.split()
    collapsed = " ".join(words)
    if len(collapsed) <= width:
        return collapsed
    kept = []
    for word in words:
        candidate = " ".join(kept + [word])
        if len(candidate) + len(placeholder) > width:
            break
        kept.append(word)
    if not kept:
        return truncate(collapsed, width, placeholder)
    return " ".join(kept) + placeholder
