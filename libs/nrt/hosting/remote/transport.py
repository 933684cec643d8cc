"""Sending a request to a remote endpoint: timeouts, connect retries, and its failures as clear errors.

A request is sent again only when no connection could be made (``httpx.ConnectError``,
``httpx.ConnectTimeout``): nothing reached the endpoint, so nothing can be generated twice.
Once the request is on its way, any failure ends it with an error (see :mod:`.failures`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import httpx
import msgspec

from nrt.adapters.retry import Backoff, retry
from nrt.hosting.model_sources import RemoteEndpoint
from nrt.hosting.remote import failures
from nrt.hosting.remote.policy import RemotePolicy

log = logging.getLogger("nrt.worker.remote")

ERROR_BODY_BYTES = 4096  # how much of an endpoint's error answer is read


class RemoteClient:
    """One pooled HTTP client for every remote endpoint of a worker (close it with :meth:`aclose`)."""

    def __init__(self, policy: RemotePolicy | None = None) -> None:
        self.policy = policy or RemotePolicy()
        self._http: httpx.AsyncClient | None = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            p = self.policy
            timeout = httpx.Timeout(p.read_timeout_s, connect=p.connect_timeout_s, pool=p.connect_timeout_s)
            self._http = httpx.AsyncClient(timeout=timeout)
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    @asynccontextmanager
    async def post(
        self, endpoint: RemoteEndpoint, url: str, headers: Mapping[str, str], body: object
    ) -> AsyncIterator[httpx.Response]:
        """POST ``body`` as JSON to ``url``; the endpoint's 2xx answer, open (stream it or read it).

        An error answer, a timeout, a broken connection or an unreadable answer (while the
        caller reads it) is a :class:`RemoteError` that names the endpoint."""
        request = self._client().build_request("POST", url, json=body, headers=dict(headers))
        response = await self._send(endpoint, request)
        try:
            if response.is_error:
                head = await _read_some(response)
                raise failures.status_failure(endpoint, response.status_code, head, response.headers)
            yield response
        except httpx.TimeoutException as exc:
            raise failures.timed_out(endpoint, self.policy.read_timeout_s, exc) from exc
        except httpx.HTTPError as exc:
            raise failures.broken(endpoint, exc) from exc
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise failures.bad_answer(endpoint, str(exc)) from exc
        finally:
            await response.aclose()

    async def _send(self, endpoint: RemoteEndpoint, request: httpx.Request) -> httpx.Response:
        """The response's head; connect failures are tried again, up to the policy's attempts."""
        attempts = max(1, self.policy.connect_attempts)

        def connect_failed(failure: Exception, attempt: int, wait_s: float) -> None:
            log.warning(
                "could not connect to %s (attempt %d of %d: %s); retrying in %.2f s",
                endpoint.base_url,
                attempt,
                attempts,
                failure,
                wait_s,
            )

        try:
            return await retry(
                lambda: self._client().send(request, stream=True),
                Backoff(first_s=self.policy.retry_backoff_s),
                connect_failed,
                retry_on=(httpx.ConnectError, httpx.ConnectTimeout),
                attempts=attempts,
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise failures.unreachable(endpoint, attempts, exc) from exc
        except httpx.TimeoutException as exc:
            raise failures.timed_out(endpoint, self.policy.read_timeout_s, exc) from exc
        except httpx.HTTPError as exc:
            raise failures.broken(endpoint, exc) from exc


async def _read_some(response: httpx.Response) -> bytes:
    """The start of an error answer (a misbehaving endpoint's endless body is not read to its end)."""
    head = b""
    async for data in response.aiter_bytes():
        head += data
        if len(head) >= ERROR_BODY_BYTES:
            break
    return head[:ERROR_BODY_BYTES]
