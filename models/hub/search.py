"""Searching the Hub for models QuantDesk can run (GGUF) or convert (safetensors).

One page of results at a time, sorted by downloads, likes or recency. The Hub's own
paging is a cursor in a ``Link`` header that ``HfApi.list_models`` follows inside its
generator; a page here asks ``list_models`` for ``(page + 1) × page_size + 1`` results
and keeps the last page (the extra one tells whether another page exists). That is one
request per page and works unchanged on any server that speaks the Hub's API.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from itertools import islice
from typing import Optional, Union

from models.foundation.errors import QuantDeskError
from models.foundation.jobs import CancelToken
from models.hub.client import hub_api, hub_errors

# Our sort names → ``HfApi.list_models(sort=...)``; the Hub sorts these descending.
SORTS = {"downloads": "downloads", "likes": "likes", "recent": "last_modified"}
# Our format names → the Hub's library tag used as ``filter``.
FORMATS = {"gguf": "gguf", "safetensors": "safetensors", "any": None}
_EXPAND = ["author", "downloads", "likes", "lastModified", "gated", "private", "tags"]
MAX_PAGE_SIZE = 100


@dataclass(frozen=True)
class ModelSummary:
    """One search result: what a list row shows."""

    repo_id: str
    author: str
    downloads: int
    likes: int
    updated: Optional[dt.datetime]
    license: Optional[str]
    gated: Union[bool, str]  # False, or the Hub's gating mode ("auto", "manual")
    private: bool
    tags: tuple[str, ...]


@dataclass(frozen=True)
class SearchPage:
    """Results of one page; ``has_more`` says whether ``page + 1`` has any."""

    results: list[ModelSummary]
    page: int
    page_size: int
    has_more: bool


def license_from_tags(tags: Optional[list[str]]) -> Optional[str]:
    """The ``license:...`` tag's value (``apache-2.0``), or ``None``."""
    for tag in tags or []:
        if tag.startswith("license:"):
            return tag.split(":", 1)[1]
    return None


def search_models(text: str = "", fmt: str = "gguf", sort: str = "downloads", page: int = 0,
                  page_size: int = 20, author: Optional[str] = None,
                  cancel: Optional[CancelToken] = None) -> SearchPage:
    """Find models whose name contains ``text``.

    Args:
        text: Words to look for in the repo name; empty lists everything.
        fmt: ``"gguf"``, ``"safetensors"`` or ``"any"``.
        sort: ``"downloads"``, ``"likes"`` or ``"recent"``.
        page: Zero-based page number.
        page_size: Results per page (1 to 100).
        author: Only models of this user or organisation.
        cancel: Stops the request, also while it waits for the Hub.

    Raises:
        Cancelled: ``cancel`` was set.
        QuantDeskError: A bad argument, or the Hub could not be asked.
    """
    if fmt not in FORMATS:
        raise QuantDeskError(f"Unknown model format '{fmt}'.", f"Use one of: {', '.join(FORMATS)}.")
    if sort not in SORTS:
        raise QuantDeskError(f"Unknown sort order '{sort}'.", f"Use one of: {', '.join(SORTS)}.")
    if page < 0 or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise QuantDeskError(f"Page {page} of size {page_size} is not a valid page.",
                             f"Pages start at 0 and hold 1 to {MAX_PAGE_SIZE} results.")
    wanted = (page + 1) * page_size + 1
    with hub_errors(f"the search for '{text}'", cancel):
        models = hub_api().list_models(search=text or None, filter=FORMATS[fmt], author=author,
                                       sort=SORTS[sort], limit=wanted, expand=_EXPAND)
        rows = list(islice(models, page * page_size, wanted))
    results = [
        ModelSummary(
            repo_id=m.id,
            author=m.author or m.id.split("/")[0],
            downloads=m.downloads or 0,
            likes=m.likes or 0,
            updated=m.last_modified,
            license=license_from_tags(m.tags),
            gated=m.gated or False,
            private=bool(m.private),
            tags=tuple(m.tags or ()),
        )
        for m in rows[:page_size]
    ]
    return SearchPage(results, page, page_size, has_more=len(rows) > page_size)
