"""What a running vLLM server says it is, read from its own endpoints: the vLLM version (``/version``), the model
it serves and its context length (``/v1/models``), its KV-cache settings (``vllm:cache_config_info`` in
``/metrics``), and the model's dtype where the server says it (``/server_info``, which vLLM serves in its development
mode, ``VLLM_SERVER_DEV_MODE=1``). A cell compares it before it resumes (:mod:`anyjev.run.server_check`)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import urllib3

from anyjev.errors import BackendError, UnauthorizedError
from anyjev.serving.health import get, http_client

# The KV-cache settings that change what a server computes (cache_config_info holds more: memory, block counts).
CACHE_KEYS = ("block_size", "cache_dtype", "enable_prefix_caching")
_INFO = re.compile(r'^vllm:cache_config_info\{(?P<labels>[^}]*)\}\s')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ServerDescription:
    """What a server's endpoints say it is (a server restarted with the same settings says the same)."""

    vllm_version: str | None
    model_root: str | None  # what the server loaded (/v1/models "root": a hub id, or a folder: relative when under here)
    max_model_len: int | None
    cache: dict[str, str] = field(default_factory=dict)
    model_dtype: str | None = None  # the model's dtype, where the server says it (/server_info)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def compared(self) -> dict[str, Any]:
        """The fields a resumed cell must find unchanged."""
        return {"vllm_version": self.vllm_version, "model_root": self.model_root, "max_model_len": self.max_model_len,
                "dtype": self.model_dtype, **{f"cache.{k}": self.cache.get(k) for k in CACHE_KEYS}}


def describe_server(base_url: str, served_name: str, *, api_key: str | None = None,
                    timeout: float = 10.0) -> ServerDescription:
    """Ask the server at BASE_URL what it is (four GETs, carrying API_KEY). The model must be listed as SERVED_NAME;
    an endpoint that does not answer leaves its fields None, but a server that answers none of them raises
    BackendError, and one that refuses the key (401: vLLM's /v1/models) :class:`UnauthorizedError`."""
    base = base_url.rstrip("/")
    with http_client(timeout, connect=min(timeout, 5.0), api_key=api_key) as client:
        version = _get_json(client, f"{base}/version")
        models = _get_json(client, f"{base}/v1/models")
        metrics = _get_text(client, f"{base}/metrics")
        info = _get_json(client, f"{base}/server_info?config_format=json")
    if version is None and models is None:
        raise BackendError(f"{base} answers neither /version nor /v1/models: is it a vLLM server?")
    card = _model_card(models, served_name, base)
    return ServerDescription(
        vllm_version=str(version["version"]) if isinstance(version, dict) and "version" in version else None,
        model_root=portable_path(str(card["root"])) if card.get("root") is not None else None,
        max_model_len=int(card["max_model_len"]) if isinstance(card.get("max_model_len"), int) else None,
        cache=cache_settings(metrics or ""),
        model_dtype=server_info_dtype(info),
    )


def server_info_dtype(server_info: Any) -> str | None:
    """The model's dtype in a ``/server_info`` answer (``torch.bfloat16`` -> ``bfloat16``); None without one."""
    try:
        dtype = server_info["vllm_config"]["model_config"]["dtype"]
    except (KeyError, TypeError):
        return None
    return str(dtype).removeprefix("torch.") if dtype is not None else None


def portable_path(root: str) -> str:
    """ROOT relative to the working directory when it is a folder under it (a run's prepared model, wherever the run
    folder is), else as given (a hub id, or a folder elsewhere)."""
    path = Path(root)
    if not path.is_absolute():
        return root
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return root


def cache_settings(metrics_text: str) -> dict[str, str]:
    """The :data:`CACHE_KEYS` of the first ``vllm:cache_config_info`` line (one per engine; they agree)."""
    for line in metrics_text.splitlines():
        m = _INFO.match(line)
        if m:
            labels = dict(_LABEL.findall(m["labels"]))
            return {k: labels[k] for k in CACHE_KEYS if k in labels}
    return {}


def _model_card(models: Any, served_name: str, base: str) -> dict[str, Any]:
    if models is None:
        return {}
    cards = [m for m in models.get("data", []) if isinstance(m, dict)] if isinstance(models, dict) else []
    for card in cards:
        if card.get("id") == served_name:
            return card
    listed = ", ".join(repr(c.get("id")) for c in cards) or "nothing"
    raise BackendError(f"{base}/v1/models lists {listed}, not {served_name!r} (the cell's served_name)")


def _get_json(client: urllib3.PoolManager, url: str) -> Any:
    text = _get_text(client, url)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _get_text(client: urllib3.PoolManager, url: str) -> str | None:
    try:
        resp = get(client, url)
    except urllib3.exceptions.HTTPError:
        return None
    if resp.status == 401:
        carried = "another" if "Authorization" in client.headers else "none"
        raise UnauthorizedError(f"GET {url} answered HTTP 401: the server requires an API key, and this request "
                                f"carried {carried}")
    return resp.data.decode("utf-8", "replace") if resp.status == 200 else None
