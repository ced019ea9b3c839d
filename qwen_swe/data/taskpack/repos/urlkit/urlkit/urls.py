"""Split URLs into parts by hand, put them back together, normalise and resolve them."""

import re
from collections import namedtuple

from urlkit.errors import check
from urlkit.percent import normalize_escapes

SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)", re.DOTALL)
DEFAULT_PORTS = {"http": 80, "https": 443}

URL = namedtuple("URL", "scheme host port path query fragment")


def split_url(url):
    """``"https://Example.com:8443/a?b=1#top"`` -> ``URL("https", "example.com", 8443, "/a", "b=1", "top")``."""
    match = re.fullmatch(SCHEME, url)
    check(match is not None, "not an absolute URL: %r" % url)
    scheme, rest = match.group(1).lower(), match.group(2)
    rest, _, fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    if not rest.startswith("//"):
        return URL(scheme, "", None, rest, query, fragment)
    authority, slash, path = rest[2:].partition("/")
    host, port = split_host_port(authority)
    return URL(scheme, host, port, slash + path, query, fragment)


def split_host_port(authority):
    """``"user@Example.COM:8080"`` -> ``("example.com", 8080)``; user info is dropped, IPv6 loses its brackets."""
    hostport = authority.rsplit("@", 1)[-1]
    if not hostport.startswith("["):
        host, _, port_text = hostport.partition(":")
        return host.lower(), parse_port(port_text)
    host, bracket, after = hostport[1:].partition("]")
    check(bracket == "]", "unclosed bracket in %r" % authority)
    check(after == "" or after.startswith(":"), "junk after the IPv6 address in %r" % authority)
    return host.lower(), parse_port(after[1:])


def parse_port(text):
    """``"8080"`` -> ``8080``; an empty port is ``None``."""
    if not text:
        return None
    check(text.isdigit(), "port is not a number: %r" % text)
    port = int(text)
    check(port < 65536, "port out of range: %d" % port)
    return port


def join_host_port(host, port=None, scheme=""):
    """``("::1", 8080)`` -> ``"[::1]:8080"``; the scheme's default port is left out."""
    if ":" in host:
        host = "[" + host + "]"
    if port is None or port == DEFAULT_PORTS.get(scheme):
        return host
    return host + ":%d" % port


def unsplit_url(url):
    """The text of a ``URL`` tuple: the inverse of ``split_url``."""
    authority = "//" + join_host_port(url.host, url.port, url.scheme) if url.host else ""
    query = "?" + url.query if url.query else ""
    fragment = "#" + url.fragment if url.fragment else ""
    return url.scheme + ":" + authority + url.path + query + fragment


def origin(url):
    """``"https://a.example:8443/x"`` -> ``"https://a.example:8443"``."""
    parts = split_url(url)
    check(parts.host != "", "no host in %r" % url)
    return parts.scheme + "://" + join_host_port(parts.host, parts.port, parts.scheme)


def remove_dot_segments(path):
    """``"/a/b/../c/./d"`` -> ``"/a/c/d"``; ``..`` never climbs above the root."""
    check(path == "" or path.startswith("/"), "not an absolute path: %r" % path)
    segments = path.split("/")
    output = []
    for segment in segments:
        if segment == "..":
            if len(output) > 1:
                output.pop()
        elif segment != ".":
            output.append(segment)
    if segments[-1] in (".", ".."):
        output.append("")
    return "/".join(output)


def normalize_url(url):
    """Lower-case scheme and host, drop the default port, clean the path and upper-case escapes."""
    parts = split_url(url)
    path = normalize_escapes(parts.path)
    if parts.host:
        path = remove_dot_segments(path) or "/"
    return unsplit_url(parts._replace(path=path, query=normalize_escapes(parts.query)))


def resolve(base, ref):
    """Resolve the link ``ref`` against the absolute URL ``base``, as a browser would."""
    if re.match(SCHEME, ref):
        return ref
    parts = split_url(base)
    if ref.startswith("//"):
        return parts.scheme + ":" + ref
    rest, _, fragment = ref.partition("#")
    path, mark, query = rest.partition("?")
    if not path:
        path = parts.path
        query = query if mark else parts.query
    elif not path.startswith("/"):
        path = parts.path.rsplit("/", 1)[0] + "/" + path
    return unsplit_url(parts._replace(path=remove_dot_segments(path), query=query, fragment=fragment))


def redact_password(url, mask="*"):
    """``"https://bob:secret@host/"`` -> ``"https://bob:******@host/"``."""
    scheme, slashes, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    userinfo, at, hostport = authority.rpartition("@")
    user, colon, password = userinfo.partition(":")
    return scheme + slashes + user + colon + mask * len(password) + at + hostport + slash + path
