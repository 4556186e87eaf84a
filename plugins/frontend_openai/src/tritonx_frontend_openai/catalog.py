"""Which tritonx model backs which OpenAI model id, and what the frontend keeps per model
version: its convention, tokenizer, chat template and tool-call parser.

By default every ready model that follows a convention (:mod:`.conventions`) is served under
its own name; ``--frontend-config openai,models=<id>:<model>,...`` serves exactly the ids it
lists. What a model version needs is built on its first use and kept until the version is
replaced (a reload gives a new config object).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonx import ModelConfig, ServerHandle, ServerSettings, TritonXError
from tritonx_frontend_openai.conventions import Convention, detect
from tritonx_frontend_openai.errors import OpenAIError, model_not_found
from tritonx_frontend_openai.options import Options, check_tool_parser

if TYPE_CHECKING:
    from tritonx_frontend_openai.chat import ChatTemplate
    from tritonx_frontend_openai.tokens import Tokenizer
    from tritonx_frontend_openai.tools import ParsedOutput

log = logging.getLogger("tritonx.frontend.openai")

#: what ``/v1/models`` says owns the models
OWNED_BY = "tritonx"

#: files of a model folder that hold its tokenizer or chat template
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@dataclass
class Entry:
    """One served model version.

    :ivar id: the OpenAI model id.
    :ivar model: the tritonx model behind it.
    :ivar convention: how requests are written for it.
    :ivar created: when the frontend first saw this version (seconds since the epoch).
    :ivar folder: the folder its tokenizer and chat template are read from (None: none).
    """

    id: str
    model: str
    convention: Convention
    created: int
    folder: Path | None
    config: ModelConfig
    tool_parser_name: str | None = None
    chat_template_source: str | None = None
    #: why the model config's ``chat_template`` cannot be used (its chat requests get it)
    chat_template_error: str | None = None
    _tokenizer: Tokenizer | None = field(default=None, repr=False)
    _template: ChatTemplate | None = field(default=None, repr=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def describe(self) -> dict[str, Any]:
        """The model object of ``/v1/models``."""
        return {"id": self.id, "object": "model", "created": self.created, "owned_by": OWNED_BY}

    async def tokenizer(self) -> Tokenizer:
        """The model's tokenizer (loaded in a worker thread on first use)."""
        if self._tokenizer is None:
            async with self._lock:
                if self._tokenizer is None:
                    from tritonx_frontend_openai.tokens import load_tokenizer

                    self._tokenizer = await asyncio.to_thread(load_tokenizer, self.folder)
        return self._tokenizer

    async def template(self) -> ChatTemplate:
        """The model's chat template (resolved in a worker thread on first use)."""
        if self.chat_template_error is not None:
            raise OpenAIError(
                500,
                f"the chat template of model '{self.id}' cannot be used: "
                f"{self.chat_template_error}",
                type="server_error",
            )
        if self._template is None:
            async with self._lock:
                if self._template is None:
                    from tritonx_frontend_openai.chat import ChatTemplate

                    try:
                        self._template = await asyncio.to_thread(
                            ChatTemplate.resolve,
                            source=self.chat_template_source,
                            model_dir=self.folder,
                        )
                    except Exception as exc:
                        raise OpenAIError(
                            500,
                            f"the chat template of model '{self.id}' cannot be used: {exc}",
                            type="server_error",
                        ) from exc
        return self._template

    def tool_parser(self) -> Callable[[str], ParsedOutput] | None:
        """The tool-call parser the model's text goes through (None: none configured)."""
        if self.tool_parser_name is None:
            return None
        from tritonx_frontend_openai.tools import TOOL_PARSERS

        parser = TOOL_PARSERS.get(self.tool_parser_name)
        if parser is None:
            raise OpenAIError(
                500,
                f"model '{self.model}' names an unknown tool_call_parser "
                f"'{self.tool_parser_name}' (available: {', '.join(sorted(TOOL_PARSERS))})",
                type="server_error",
            )
        return parser


class Catalog:
    """The OpenAI model ids served now, over the server's ready models."""

    def __init__(self, server: ServerHandle, settings: ServerSettings, options: Options) -> None:
        self.server = server
        self.settings = settings
        self.options = options
        #: tritonx model -> (the config it was built from, its entry or why it is not served)
        self._seen: dict[str, tuple[ModelConfig, Entry | str]] = {}

    # ------------------------------------------------------------------ lookups

    def model_for(self, model_id: str) -> str:
        """The tritonx model behind ``model_id`` (404 ``model_not_found`` if none may be)."""
        mapping = self.options.models
        if mapping is None:
            return model_id
        model = mapping.get(model_id)
        if model is None:
            raise model_not_found(model_id)
        return model

    def entry(self, model_id: str, config: ModelConfig, kind: str) -> Entry:
        """The entry of ``model_id`` for the model version whose config is ``config``;
        raises OpenAI's 404 when that model follows no convention, 400 when it is not a
        ``kind`` (``generate`` / ``embed``) model."""
        found = self._build(model_id, config)
        if isinstance(found, str):
            log.debug("model '%s' is not served: %s", config.name, found)
            raise model_not_found(model_id)
        if found.convention.kind != kind:
            what = "text generation" if kind == "generate" else "embeddings"
            raise OpenAIError(
                400,
                f"The model '{model_id}' does not support {what} (it is "
                f"{'a text generation' if kind == 'embed' else 'an embeddings'} model).",
                param="model",
                code="model_not_supported",
            )
        return found

    def listing(self) -> list[Entry]:
        """Every id served now (``GET /v1/models``), in id order."""
        mapping = self.options.models
        pairs = (
            list(mapping.items())
            if mapping is not None
            else [(name, name) for name in self._ready_models()]
        )
        out = []
        for model_id, model in pairs:
            try:
                config = self.server.model_config(model)
            except TritonXError:
                continue  # not ready
            found = self._build(model_id, config)
            if not isinstance(found, str):
                out.append(found)
        return sorted(out, key=lambda e: e.id)

    def find(self, model_id: str) -> Entry:
        """``GET /v1/models/{id}``: the entry of a served id, or 404."""
        try:
            model = self.model_for(model_id)
            config = self.server.model_config(model)
        except TritonXError:
            raise model_not_found(model_id) from None
        found = self._build(model_id, config)
        if isinstance(found, str):
            raise model_not_found(model_id)
        return found

    # ------------------------------------------------------------------ building

    def _build(self, model_id: str, config: ModelConfig) -> Entry | str:
        key = f"{model_id}\0{config.name}"
        cached = self._seen.get(key)
        if cached is not None and cached[0] is config:
            return cached[1]
        found = detect(config, self.options.request_format)
        result: Entry | str
        if isinstance(found, str):
            result = found
        else:
            params = config.parameters
            parser = params.get("tool_call_parser") or self.options.tool_call_parser
            if parser and params.get("tool_call_parser"):
                try:
                    check_tool_parser(parser, f"model '{config.name}' parameter tool_call_parser")
                except Exception as exc:  # logged; requests with tools then get the error
                    log.warning("%s", exc)
            folder = self._model_folder(config.name)
            from tritonx_frontend_openai.chat import looks_like_template  # (jinja2: lazily)

            template = params.get("chat_template") or None
            template_error = None
            if template is not None and not looks_like_template(template):
                path = _in_folder(folder, template)
                if path is None:
                    template_error = (
                        f"parameter chat_template '{template}' is not a file in the model's folder"
                    )
                template = str(path) if path is not None else None
            result = Entry(
                id=model_id,
                model=config.name,
                convention=found,
                created=int(time.time()),
                folder=self._resource_folder(config, folder),
                config=config,
                tool_parser_name=parser or None,
                chat_template_source=template or self.options.chat_template,
                chat_template_error=template_error,
            )
        self._seen[key] = (config, result)
        return result

    def _ready_models(self) -> list[str]:
        """The names of the ready models (the repository index)."""
        return sorted({entry.name for entry in self.server.repository_index(ready_only=True)})

    def _model_folder(self, name: str) -> Path | None:
        """The folder the ready model was loaded from (its repository folder, a cloud
        repository's local copy, a load-API override's folder)."""
        try:
            return self.server.model_folder(name)
        except TritonXError:
            return None

    def _resource_folder(self, config: ModelConfig, folder: Path | None) -> Path | None:
        """The folder the model's tokenizer and chat template are looked for in
        (:func:`.tokens.candidate_dirs` of it): ``--frontend-config openai,tokenizer``, else
        the model's folder, else (an ensemble without tokenizer files of its own) the folder
        of the first step model that has them."""
        if self.options.tokenizer is not None:
            return self.options.tokenizer
        found = self._with_tokenizer(config.name, set())
        return found if found is not None else folder

    def _with_tokenizer(self, name: str, visited: set[str]) -> Path | None:
        from tritonx_frontend_openai.tokens import candidate_dirs

        if name in visited or len(visited) > 16:
            return None
        visited.add(name)
        folder = self._model_folder(name)
        if folder is None:
            return None
        for candidate in candidate_dirs(folder):
            if any((candidate / f).is_file() for f in _TOKENIZER_FILES):
                return folder
        try:
            config = self.server.model_config(name)
        except TritonXError:
            return None
        for step in config.raw.ensemble_scheduling.step:
            found = self._with_tokenizer(step.model_name, visited)
            if found is not None:
                return found
        return None


__all__ = ["OWNED_BY", "Catalog", "Entry"]


def _in_folder(folder: Path | None, name: str) -> Path | None:
    """The model config's ``chat_template`` file ``name`` if it lies in the model's folder
    (a config, possibly a load-API override, may not make the frontend read other files)."""
    if folder is None:
        return None
    root = folder.resolve()
    path = (root / name).resolve()
    return path if path.is_relative_to(root) and path.is_file() else None
