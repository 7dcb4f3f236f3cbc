"""The fields of a form in a page, as a browser would send them (hidden inputs and values)."""

from __future__ import annotations

from html.parser import HTMLParser


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[dict[str, str], dict[str, str]]] = []
        self._current: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "form":
            self._current = {}
            self.forms.append((values, self._current))
        elif tag == "input" and self._current is not None and "name" in values:
            if values.get("type") == "checkbox" and "checked" not in values:
                return
            self._current[values["name"]] = values.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None


def form(html: str, **match: str) -> dict[str, str]:
    """The fields of the first form whose attributes include `match` (id="next-batch"...;
    class_ for class)."""
    parser = _Forms()
    parser.feed(html)
    for attrs, fields in parser.forms:
        if all(attrs.get(k.rstrip("_").replace("_", "-")) == v for k, v in match.items()):
            return dict(fields)
    raise AssertionError(f"no form with {match} in the page")
