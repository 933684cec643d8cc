"""Manifest validation: plain YAML values in, a typed ``Manifest`` or every problem out."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from nrt.core.manifest.dispatch import DISPATCH_SETS, parse_rule
from nrt.core.manifest.errors import ManifestError, Problem
from nrt.core.manifest.model import (
    DECLARABLE_TIERS,
    PROMOTION_HINTS,
    STICKY_MARGIN,
    TEMPLATE_FIELDS,
    TURN_FIELDS,
    Audit,
    DeviceRequirement,
    DrainPolicy,
    Generation,
    LruPolicy,
    Manifest,
    ModelSpec,
    Priority,
    Resources,
    Role,
    Routing,
    Tier,
    TurnTemplate,
    WeightFormat,
)
from nrt.core.manifest.template_fields import fields_problem, places
from nrt.core.manifest.yamltree import KeyPath, YamlTree, parse_yaml, render_path
from nrt.core.units import format_size, parse_duration, parse_size

FootprintOf = Callable[[str], int | None]
"""Bytes a model from this ``source`` needs, when known (the catalogue knows its own)."""

T = TypeVar("T")

TOP_KEYS = ("cluster", "resources", "models", "fallback", "routing", "lru", "drain", "audit")
RESOURCE_KEYS = ("gpu_budget", "ram_budget")
MODELS_KEYS = ("router", "specialists")
MODEL_KEYS = (
    "source",
    "tier",
    "priority",
    "max_active_sessions",
    "co_activation",
    "promotion_hint",
    "footprint",
    "device",
    "quantization",
    "description",
    "template",
    "turn_template",
    "generation",
    "remote_model",
    "api_key_env",
    "base_url",
)
ROUTER_KEYS = (*MODEL_KEYS, "intents", "confidence_threshold")
SPECIALIST_KEYS = ("id", *MODEL_KEYS, "replicas")
FALLBACK_KEYS = (*MODEL_KEYS, "replicas")
TURN_KEYS = ("system", "user", "assistant")
ROUTER_PROMPT_FIELDS = ("labels", "text")  # a label-likelihood router's classification prompt
GENERATION_KEYS = ("max_tokens", "temperature", "top_p", "stop")
ROUTING_KEYS = ("entry", "dispatch_rule", "sticky_margin")
LRU_KEYS = ("idle_threshold", "min_lifetime", "sweep_interval")
DRAIN_KEYS = ("timeout", "admission_wait")
AUDIT_KEYS = ("record_prompts",)
RESERVED_IDS = ("router", "fallback")
ID_CHARS = "letters, digits, '_' and '-'"


def _http_url(text: str) -> bool:
    parts = urlsplit(text.strip())
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname) and not parts.query


def _no_footprint(_source: str) -> int | None:
    return None


def load_manifest(path: str | Path, footprint_of: FootprintOf = _no_footprint) -> Manifest:
    """Read and validate a manifest file; raises ManifestError listing every problem."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(str(file), [Problem("", f"cannot read the manifest: {exc.strerror}")]) from exc
    return parse_manifest(text, str(file), footprint_of)


def parse_manifest(
    text: str, file: str = "<manifest>", footprint_of: FootprintOf = _no_footprint, *, budgets: bool = True
) -> Manifest:
    """Validate manifest ``text``; raises ManifestError listing every problem.

    ``budgets=False`` leaves out the check that each tier's models fit its budget: for a caller
    that reports it itself (the what-if report of ``nrt replay --what-if``)."""
    tree = parse_yaml(text)
    reader = _Reader(tree, budgets)
    manifest = reader.manifest(text, footprint_of) if not tree.problems else None
    problems = tree.problems + reader.problems
    if problems or manifest is None:
        raise ManifestError(file, problems or [Problem("", "the manifest is empty")])
    return manifest


def _choices(options: Sequence[str]) -> str:
    quoted = [f"'{o}'" for o in options]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + f" or {quoted[-1]}"


def _valid_id(value: str) -> bool:
    return bool(value) and all(c.isalnum() or c in "_-" for c in value)


class _Reader:
    """Walks the YAML values, collecting problems instead of stopping at the first."""

    def __init__(self, tree: YamlTree, budgets: bool = True) -> None:
        self.tree = tree
        self.budgets = budgets
        self.problems: list[Problem] = []

    # -- primitives -------------------------------------------------------------------

    def fail(self, path: KeyPath, message: str) -> None:
        self.problems.append(Problem(render_path(path), message, self.tree.line(path)))

    def mapping(self, value: object, path: KeyPath, allowed: Sequence[str], what: str) -> Mapping[str, object]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(path, f"{what} must be a mapping with keys {_choices(allowed)}")
            return {}
        for key in value:
            if key not in allowed:
                self.fail((*path, key), f"unknown key '{key}' in {what}; valid keys: {_choices(allowed)}")
        return value

    def required(self, data: Mapping[str, object], path: KeyPath, key: str, what: str) -> object:
        if key not in data or data[key] is None:
            self.fail(path, f"{what} is missing required key '{key}'")
            return None
        return data[key]

    def typed(self, value: object, path: KeyPath, kind: type[T], hint: str) -> T | None:
        if value is None:
            return None
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)  # type: ignore[return-value]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            self.fail(path, f"expected {hint}, got {value!r}")
            return None
        return value

    def converted(self, value: object, path: KeyPath, convert: Callable[[str | int], T]) -> T | None:
        if value is None:
            return None
        try:
            return convert(value)  # type: ignore[arg-type]
        except (ValueError, TypeError) as exc:
            self.fail(path, str(exc))
            return None

    def choice(self, value: object, path: KeyPath, options: Sequence[str], what: str) -> str | None:
        if value is None:
            return None
        if value not in options:
            self.fail(path, f"unknown {what} {value!r}; valid: {_choices(options)}")
            return None
        return str(value)

    # -- sections ---------------------------------------------------------------------

    def manifest(self, text: str, footprint_of: FootprintOf) -> Manifest | None:
        if self.tree.value is None or self.tree.value == {}:
            self.fail((), f"the manifest is empty; expected keys {_choices(TOP_KEYS)}")
            return None
        root = self.mapping(self.tree.value, (), TOP_KEYS, "the manifest")
        if not root:
            return None
        cluster = self.typed(self.required(root, (), "cluster", "the manifest"), ("cluster",), str, "a cluster name")
        resources = self.resources(root.get("resources"))
        models = self.mapping(root.get("models"), ("models",), MODELS_KEYS, "models")
        if "models" not in root:
            self.fail((), "the manifest is missing required key 'models'")
        router = self.model(models.get("router"), ("models", "router"), Role.ROUTER) if "router" in models else None
        if "models" in root and router is None and "router" not in models:
            self.fail(("models",), "models is missing required key 'router'")
        specialists = self.specialists(models.get("specialists"))
        fallback = self.model(root["fallback"], ("fallback",), Role.FALLBACK) if root.get("fallback") else None
        lru = self.lru(root.get("lru"))
        drain = self.drain(root.get("drain"))
        audit = self.audit(root.get("audit"))
        all_models = [m for m in (router, *specialists, fallback) if m is not None]
        self.check_ids(specialists)
        routing = self.routing(root.get("routing"), all_models, specialists)
        self.check_co_activation(all_models)
        if self.budgets:
            self.check_budgets(resources, all_models, footprint_of)
        if self.problems or cluster is None or router is None or routing is None:
            return None
        return Manifest(cluster, resources, router, tuple(specialists), fallback, routing, lru, drain, text, audit)

    def resources(self, value: object) -> Resources:
        data = self.mapping(value, ("resources",), RESOURCE_KEYS, "resources")
        return Resources(
            gpu_budget=self.converted(data.get("gpu_budget"), ("resources", "gpu_budget"), parse_size),
            ram_budget=self.converted(data.get("ram_budget"), ("resources", "ram_budget"), parse_size),
        )

    def specialists(self, value: object) -> list[ModelSpec]:
        path: KeyPath = ("models", "specialists")
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(path, "specialists must be a list of models, each with an 'id'")
            return []
        out = []
        for i, item in enumerate(value):
            spec = self.model(item, (*path, i), Role.SPECIALIST)
            if spec is not None:
                out.append(spec)
        return out

    def model(self, value: object, path: KeyPath, role: Role) -> ModelSpec | None:
        allowed = {Role.ROUTER: ROUTER_KEYS, Role.SPECIALIST: SPECIALIST_KEYS, Role.FALLBACK: FALLBACK_KEYS}[role]
        what = {Role.ROUTER: "the router", Role.SPECIALIST: "a specialist", Role.FALLBACK: "the fallback"}[role]
        if isinstance(value, dict) and "id" in value and role is not Role.SPECIALIST:
            self.fail((*path, "id"), f"{what} has the implicit id '{role.value}'; remove 'id'")
            value = {k: v for k, v in value.items() if k != "id"}
        data = self.mapping(value, path, allowed, what)
        if not data:
            if value is not None and not isinstance(value, dict):
                return None
            self.fail(path, f"{what} must declare at least 'source'")
            return None
        if role is Role.SPECIALIST:
            model_id = self.typed(self.required(data, path, "id", what), (*path, "id"), str, "an id")
            if model_id is not None and not _valid_id(model_id):
                self.fail((*path, "id"), f"id {model_id!r} may contain only {ID_CHARS}")
                model_id = None
            if model_id in RESERVED_IDS:
                self.fail((*path, "id"), f"id {model_id!r} is reserved for the {model_id}; choose another")
                model_id = None
        else:
            model_id = role.value
        source = self.typed(self.required(data, path, "source", what), (*path, "source"), str, "a source string")
        tier = self.choice(data.get("tier"), (*path, "tier"), [t.value for t in DECLARABLE_TIERS], "tier")
        priority = self.choice(data.get("priority"), (*path, "priority"), [p.value for p in Priority], "priority")
        hint = self.choice(data.get("promotion_hint"), (*path, "promotion_hint"), PROMOTION_HINTS, "promotion_hint")
        sessions = self.typed(data.get("max_active_sessions"), (*path, "max_active_sessions"), int, "an integer >= 1")
        if sessions is not None and sessions < 1:
            self.fail((*path, "max_active_sessions"), f"expected an integer >= 1, got {sessions}")
        co_activation = self.typed(data.get("co_activation"), (*path, "co_activation"), str, "a model id")
        footprint = self.converted(data.get("footprint"), (*path, "footprint"), parse_size)
        device = self.choice(data.get("device"), (*path, "device"), [d.value for d in DeviceRequirement], "device")
        quantization = self.choice(
            data.get("quantization"), (*path, "quantization"), [w.value for w in WeightFormat], "quantization"
        )
        description = self.typed(data.get("description"), (*path, "description"), str, "text") or ""
        template = self.template(data.get("template"), (*path, "template"), role)
        turn_template = self.turn_template(data.get("turn_template"), (*path, "turn_template"), template)
        remote_model = self.typed(data.get("remote_model"), (*path, "remote_model"), str, "a model name")
        api_key_env = self.typed(data.get("api_key_env"), (*path, "api_key_env"), str, "an environment variable")
        generation = self.generation(data.get("generation"), (*path, "generation"))
        replicas = self.typed(data.get("replicas"), (*path, "replicas"), int, "an integer >= 1")
        if replicas is not None and replicas < 1:
            self.fail((*path, "replicas"), f"expected an integer >= 1, got {replicas}")
        intents: tuple[tuple[str, tuple[str, ...]], ...] = ()
        threshold: float | None = None
        if role is Role.ROUTER:
            intents = self.intents(data.get("intents"), (*path, "intents"))
            threshold = self.threshold(data.get("confidence_threshold"), (*path, "confidence_threshold"))
        base_url = self.typed(data.get("base_url"), (*path, "base_url"), str, "an http(s) URL")
        resolved_tier = Tier(tier) if tier else Tier.RESIDENT
        if source is not None:
            self.remote_fields(source, resolved_tier, remote_model, base_url, path)
        if quantization is not None and resolved_tier is Tier.REMOTE:
            self.fail(
                (*path, "quantization"),
                "a remote model's weights are its endpoint's; 'quantization' is for models a worker prepares; remove it",
            )
        if device is not None and resolved_tier is Tier.REMOTE:
            self.fail(
                (*path, "device"),
                "a remote model runs at its endpoint; 'device' (gpu, cpu or any) is for models a worker runs; remove it",
            )
        base_url = base_url.strip().rstrip("/") if base_url else None
        if model_id is None or source is None:
            return None
        return ModelSpec(
            id=model_id,
            role=role,
            source=source,
            tier=resolved_tier,
            priority=Priority(priority) if priority else Priority.NORMAL,
            max_active_sessions=sessions if sessions is not None and sessions >= 1 else 16,
            co_activation=co_activation,
            promotion_hint=hint,
            footprint=footprint,
            device=DeviceRequirement(device) if device else DeviceRequirement.ANY,
            quantization=WeightFormat(quantization) if quantization else None,
            description=description,
            template=template,
            turn_template=turn_template,
            generation=generation,
            intents=intents,
            confidence_threshold=threshold,
            remote_model=remote_model,
            api_key_env=api_key_env,
            base_url=base_url,
            replicas=replicas if replicas is not None and replicas >= 1 else 1,
        )

    def remote_fields(
        self, source: str, tier: Tier, remote_model: str | None, base_url: str | None, path: KeyPath
    ) -> None:
        """Tier remote is for a model an endpoint serves: an http(s) one (its own base URL, ``remote_model``
        its model's name there), an anthropic:// one (``base_url`` where its API is), or an ``hf://`` model
        through an inference endpoint (``base_url`` a server of Hub models, the repository id its name).
        Endpoint sources need tier remote; a model a worker loads cannot have it."""
        scheme = source.strip().split("://", 1)[0].lower() if "://" in source else ""
        if scheme in ("http", "https", "anthropic") and tier is not Tier.REMOTE:
            kind = "an anthropic://" if scheme == "anthropic" else "an http(s) endpoint"
            self.fail((*path, "tier"), f"{kind} source is served remotely; tier must be 'remote', not '{tier.value}'")
        if tier is Tier.REMOTE and scheme not in ("http", "https", "anthropic", "hf"):
            self.fail(
                (*path, "tier"),
                "tier 'remote' is for a model an endpoint serves (source: https://host/v1, anthropic://<model>, "
                "or hf://org/name through an inference endpoint); this source is loaded by a worker: "
                "use 'resident' or 'standby'",
            )
        if tier is Tier.REMOTE and scheme == "hf" and "@" in source:
            self.fail(
                (*path, "source"),
                "an inference endpoint serves the revision it deployed; a model at tier remote cannot pin one: "
                "remove '@<revision>'",
            )
        if scheme in ("anthropic", "hf") and remote_model is not None:
            self.fail(
                (*path, "remote_model"),
                f"an {scheme}:// source names its model itself ({scheme}://...); remove 'remote_model'",
            )
        if base_url is None:
            return
        if scheme not in ("anthropic", "hf") or tier is not Tier.REMOTE:
            self.fail(
                (*path, "base_url"),
                "'base_url' is where an endpoint serving an anthropic:// source, or an hf:// source at tier remote, "
                "is; an http(s) source is its own base URL",
            )
        elif not _http_url(base_url):
            self.fail((*path, "base_url"), f"expected an http(s) URL such as https://host/v1, got {base_url!r}")

    def template(self, value: object, path: KeyPath, role: Role) -> str | None:
        """A built-in template's name, or the whole prompt with ``{system}``, ``{turns}``, ``{last_user}``
        (a router's may instead be its classification prompt, with ``{labels}`` and ``{text}``)."""
        template = self.typed(value, path, str, "a prompt template")
        allowed = (*TEMPLATE_FIELDS, *ROUTER_PROMPT_FIELDS) if role is Role.ROUTER else TEMPLATE_FIELDS
        problem = fields_problem(template, allowed) if template is not None else None
        if problem is not None:
            self.fail(path, f"the template has an {problem}" if problem.startswith("unknown") else problem)
            return None
        return template

    def turn_template(self, value: object, path: KeyPath, template: str | None) -> TurnTemplate | None:
        """The per-message parts of ``{turns}``: a ``{content}`` format per role."""
        data = self.mapping(value, path, TURN_KEYS, "turn_template")
        if not data:
            return None
        parts: dict[str, str] = {}
        for role in TURN_KEYS:
            text = self.typed(data.get(role), (*path, role), str, f"the {role} turn's format, with {{content}}")
            if text is None:
                continue
            problem = fields_problem(text, TURN_FIELDS)
            if problem is not None:
                self.fail(
                    (*path, role), f"the {role} turn has an {problem}" if problem.startswith("unknown") else problem
                )
            else:
                parts[role] = text
        if template is not None and not places(template, "turns"):
            self.fail(path, "turn_template is unused: the template has no {turns} field to place the conversation")
        return TurnTemplate(**parts)

    def generation(self, value: object, path: KeyPath) -> Generation:
        data = self.mapping(value, path, GENERATION_KEYS, "generation")
        default = Generation()
        max_tokens = self.typed(data.get("max_tokens"), (*path, "max_tokens"), int, "an integer >= 1")
        if max_tokens is not None and max_tokens < 1:
            self.fail((*path, "max_tokens"), f"expected an integer >= 1, got {max_tokens}")
            max_tokens = None
        temperature = self.typed(data.get("temperature"), (*path, "temperature"), float, "a number in [0, 2]")
        if temperature is not None and not 0.0 <= temperature <= 2.0:
            self.fail((*path, "temperature"), f"expected a number in [0, 2], got {temperature}")
            temperature = None
        top_p = self.typed(data.get("top_p"), (*path, "top_p"), float, "a number in (0, 1]")
        if top_p is not None and not 0.0 < top_p <= 1.0:
            self.fail((*path, "top_p"), f"expected a number in (0, 1], got {top_p}")
            top_p = None
        stop = self.string_list(data.get("stop"), (*path, "stop"), "stop sequences")
        return Generation(
            max_tokens=max_tokens or default.max_tokens,
            temperature=default.temperature if temperature is None else temperature,
            top_p=top_p or default.top_p,
            stop=stop,
        )

    def string_list(self, value: object, path: KeyPath, what: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.fail(path, f"{what} must be a list of non-empty strings")
            return ()
        return tuple(value)

    def intents(self, value: object, path: KeyPath) -> tuple[tuple[str, tuple[str, ...]], ...]:
        if value is None:
            return ()
        if not isinstance(value, dict) or not value:
            self.fail(path, "intents must map each intent label to a list of example utterances")
            return ()
        out = []
        for label, examples in value.items():
            if not _valid_id(label):
                self.fail((*path, label), f"intent label {label!r} may contain only {ID_CHARS}")
                continue
            out.append((label, self.string_list(examples, (*path, label), f"examples of intent '{label}'")))
        return tuple(out)

    def threshold(self, value: object, path: KeyPath) -> float | None:
        number = self.typed(value, path, float, "a number in [0, 1]")
        if number is None:
            return None
        if not 0.0 <= number <= 1.0:
            self.fail(path, f"expected a number in [0, 1], got {number}")
            return None
        return number

    def routing(self, value: object, models: list[ModelSpec], specialists: list[ModelSpec]) -> Routing | None:
        path: KeyPath = ("routing",)
        if value is None:
            self.fail((), "the manifest is missing required key 'routing'")
            return None
        data = self.mapping(value, path, ROUTING_KEYS, "routing")
        ids = list(dict.fromkeys(m.id for m in models))
        entry = self.typed(self.required(data, path, "entry", "routing"), (*path, "entry"), str, "a model id")
        if entry is not None and entry not in ids:
            self.fail((*path, "entry"), f"entry model '{entry}' is not declared; declared models: {_choices(ids)}")
            entry = None
        text = self.typed(
            self.required(data, path, "dispatch_rule", "routing"), (*path, "dispatch_rule"), str, "a rule"
        )
        if text is None:
            return None
        rule_path = (*path, "dispatch_rule")
        try:
            rule = parse_rule(text)
        except ValueError as exc:
            self.fail(rule_path, str(exc))
            return None
        if entry is not None and rule.source != entry:
            self.fail(rule_path, f"the rule reads '{rule.source}.output.intent' but the entry model is '{entry}'")
        if rule.target_set not in DISPATCH_SETS:
            self.fail(
                rule_path, f"the rule names the unknown set '{rule.target_set}'; valid: {_choices(DISPATCH_SETS)}"
            )
        specialist_ids = [s.id for s in specialists]
        if rule.fixed_target is not None and rule.fixed_target not in specialist_ids:
            valid = _choices(specialist_ids) if specialist_ids else "none are declared"
            self.fail(rule_path, f"the rule routes to unknown specialist '{rule.fixed_target}'; specialists: {valid}")
        if rule.by_intent and not specialists:
            self.fail(rule_path, "intent dispatch needs at least one specialist under models.specialists")
        margin = self.threshold(data.get("sticky_margin"), (*path, "sticky_margin"))
        if entry is None:
            return None
        return Routing(entry, rule, STICKY_MARGIN if margin is None else margin)

    def lru(self, value: object) -> LruPolicy:
        path: KeyPath = ("lru",)
        data = self.mapping(value, path, LRU_KEYS, "lru")
        default = LruPolicy()
        return LruPolicy(
            idle_threshold=self.duration(data, path, "idle_threshold", default.idle_threshold),
            min_lifetime=self.duration(data, path, "min_lifetime", default.min_lifetime),
            sweep_interval=self.duration(data, path, "sweep_interval", default.sweep_interval, positive=True),
        )

    def drain(self, value: object) -> DrainPolicy:
        path: KeyPath = ("drain",)
        data = self.mapping(value, path, DRAIN_KEYS, "drain")
        default = DrainPolicy()
        return DrainPolicy(
            timeout=self.duration(data, path, "timeout", default.timeout, positive=True),
            admission_wait=self.duration(data, path, "admission_wait", default.admission_wait),
        )

    def audit(self, value: object) -> Audit:
        path: KeyPath = ("audit",)
        data = self.mapping(value, path, AUDIT_KEYS, "audit")
        record = self.typed(data.get("record_prompts"), (*path, "record_prompts"), bool, "true or false")
        return Audit(record_prompts=bool(record))

    def duration(
        self, data: Mapping[str, object], path: KeyPath, key: str, default: float, positive: bool = False
    ) -> float:
        seconds = self.converted(data.get(key), (*path, key), parse_duration)
        if seconds is None:
            return default
        if positive and seconds <= 0:
            self.fail((*path, key), f"must be greater than zero, got {data[key]!r}")
            return default
        return seconds

    # -- cross-field checks -------------------------------------------------------------

    def check_ids(self, specialists: list[ModelSpec]) -> None:
        seen: dict[str, int] = {}
        for i, spec in enumerate(specialists):
            if spec.id in seen:
                self.fail(
                    ("models", "specialists", i, "id"),
                    f"duplicate id '{spec.id}' (first declared at models.specialists[{seen[spec.id]}]); ids must be unique",
                )
            else:
                seen[spec.id] = i

    def check_co_activation(self, models: list[ModelSpec]) -> None:
        ids = list(dict.fromkeys(m.id for m in models))
        for spec, path in zip(models, model_key_paths(models), strict=True):
            if spec.co_activation is None:
                continue
            key_path = (*path, "co_activation")
            if spec.co_activation not in ids:
                self.fail(
                    key_path,
                    f"co_activation names unknown model '{spec.co_activation}'; declared models: {_choices(ids)}",
                )
            elif spec.co_activation == spec.id:
                self.fail(
                    key_path, f"model '{spec.id}' cannot co-activate on itself; name the model whose firing warms it"
                )

    def check_budgets(self, resources: Resources, models: list[ModelSpec], footprint_of: FootprintOf) -> None:
        for tier, budget, key in (
            (Tier.RESIDENT, resources.gpu_budget, "gpu_budget"),
            (Tier.STANDBY, resources.ram_budget, "ram_budget"),
        ):
            if budget is None:
                continue
            needs = dict(_footprints(models, tier, footprint_of))
            total = sum(needs.values())
            if total > budget:
                parts = ", ".join(f"{source_ids} {format_size(n)}" for source_ids, n in needs.items())
                self.fail(
                    ("resources", key),
                    f"{tier.value} models need {format_size(total)} ({parts}) but {key} is {format_size(budget)}; "
                    f"raise {key} or move models to another tier",
                )


def model_key_paths(models: Sequence[ModelSpec]) -> Iterator[KeyPath]:
    """The key path of each of ``models`` (the router, the specialists in order, the fallback) in the
    manifest's YAML, e.g. ``("models", "specialists", 1)``: where a problem with one is reported."""
    index = 0
    for spec in models:
        if spec.role is Role.ROUTER:
            yield ("models", "router")
        elif spec.role is Role.FALLBACK:
            yield ("fallback",)
        else:
            yield ("models", "specialists", index)
            index += 1


def _footprints(models: list[ModelSpec], tier: Tier, footprint_of: FootprintOf) -> Iterator[tuple[str, int]]:
    """Bytes per distinct artifact in ``tier``: models sharing a source share one loaded copy."""
    by_source: dict[str, tuple[list[str], int]] = {}
    for spec in models:
        if spec.tier is not tier:
            continue
        size = spec.footprint if spec.footprint is not None else footprint_of(spec.source)
        if size is None:
            continue
        ids, known = by_source.get(spec.source, ([], 0))
        by_source[spec.source] = ([*ids, spec.id], max(known, size))
    for ids, size in by_source.values():
        yield "+".join(ids), size
