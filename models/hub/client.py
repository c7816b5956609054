"""One place that builds the ``huggingface_hub`` client and turns its errors into sentences.

Every Hub call goes through :func:`hub_api` (endpoint and token read now, see
:mod:`models.hub.auth`) inside :func:`hub_errors`, which maps the client's exceptions —
gated, not found, rate limited, offline — to :class:`~models.foundation.errors.QuantDeskError`
naming the repo and what to do, and makes the call stop when its cancel token is set.
Importing this module installs QuantDesk's HTTP client under ``huggingface_hub``
(:mod:`models.hub.session`: a refused connection fails at once instead of ~23 s of
retries that close the client every thread shares).
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import httpx2
from huggingface_hub import HfApi
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from models.foundation.errors import QuantDeskError
from models.foundation.jobs import CancelToken
from models.hub import session
from models.hub.auth import describe_token, hub_endpoint, resolve_token

session.install()

TOKEN_FIX = ("Accept the model's terms on its Hub page, then set HF_TOKEN or store a token "
             "in QuantDesk's settings (huggingface.co/settings/tokens).")


def hub_api() -> HfApi:
    """An ``HfApi`` for the current endpoint and token."""
    token, _ = resolve_token()
    return HfApi(endpoint=hub_endpoint(), token=token if token else False)


def error_for_status(status: int, what: str, retry_after: Optional[str] = None) -> QuantDeskError:
    """The user's sentence for an HTTP status met while fetching ``what``."""
    if status in (401, 403):
        return QuantDeskError(
            f"The Hub refused access to {what} (HTTP {status}): the model is gated or private "
            f"and QuantDesk used {describe_token()}.", TOKEN_FIX)
    if status == 404:
        return QuantDeskError(f"{what} was not found on the Hub ({hub_endpoint()}).",
                              "Check the spelling of the model name and file.")
    if status == 429:
        wait = f" for {retry_after} s" if retry_after else ""
        return QuantDeskError(f"The Hub is rate-limiting requests for {what}{wait}.",
                              "Wait a minute and try again; a token raises the limit.")
    return QuantDeskError(f"The Hub answered HTTP {status} for {what}.",
                          "Try again later; check https://status.huggingface.co.")


@contextlib.contextmanager
def hub_errors(what: str, cancel: Optional[CancelToken] = None) -> Iterator[None]:
    """Re-raise ``huggingface_hub``/``httpx2`` errors met while working on ``what`` as sentences.

    Requests inside stop with :class:`~models.foundation.errors.Cancelled` once ``cancel`` is set,
    also while they wait for the Hub (:func:`models.hub.session.cancellable`).
    """
    try:
        with session.cancellable(cancel):
            yield
    except GatedRepoError as exc:
        raise error_for_status(exc.response.status_code if exc.response is not None else 403, what) from exc
    except RevisionNotFoundError as exc:
        raise QuantDeskError(f"{what}: that revision does not exist on the Hub.",
                             "Use a branch name such as main, or a commit id from the model page.") from exc
    except RemoteEntryNotFoundError as exc:
        raise error_for_status(404, what) from exc
    except RepositoryNotFoundError as exc:
        status = exc.response.status_code if exc.response is not None else 404
        if status == 401:
            raise QuantDeskError(
                f"{what} was not found on the Hub, or it is private and QuantDesk used {describe_token()}.",
                TOKEN_FIX) from exc
        raise error_for_status(404, what) from exc
    except HfHubHTTPError as exc:
        response = exc.response
        status = response.status_code if response is not None else 0
        raise error_for_status(status, what, response.headers.get("Retry-After") if response is not None
                               else None) from exc
    except httpx2.TransportError as exc:
        raise QuantDeskError(f"QuantDesk could not reach the Hub at {hub_endpoint()} for {what} ({exc}).",
                             "Check the internet connection (and HF_ENDPOINT if you set it).") from exc


def probe_hub(timeout: float = 3.0, cancel: Optional[CancelToken] = None) -> None:
    """One quick request to the Hub, with a short timeout; raises the offline sentence.

    A refused connection fails a search at once (:mod:`models.hub.session`), but one that
    hangs — a black-holed address, a slow DNS, a Hub that accepts and does not answer —
    waits for the client's longer timeouts. A search that has not answered after a
    moment runs this probe beside it, so the user hears "could not reach the Hub" in
    seconds, and the search is cancelled.
    """
    from huggingface_hub.utils import get_session

    with hub_errors("a quick check of the connection", cancel):
        get_session().get(f"{hub_endpoint()}/api/models", params={"limit": 1}, timeout=timeout)
