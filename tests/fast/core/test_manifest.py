"""Manifest parsing: the spec example parses unchanged; every bad manifest says what is wrong, where."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from nrt.core.manifest import (
    DeviceRequirement,
    ManifestError,
    Priority,
    Tier,
    TurnTemplate,
    WeightFormat,
    diff_manifests,
    load_manifest,
    parse_manifest,
)
from nrt.entrypoints.cli.main import cli
from paths import FIXTURES, ROOT

SPEC = FIXTURES / "spec-customer-support.yaml"

GOOD = textwrap.dedent(
    """\
    cluster: demo
    resources:
      gpu_budget: 2GB
      ram_budget: 1.5GiB
    models:
      router:
        source: catalogue://minilm-l6
        tier: resident
        priority: critical
        intents:
          billing: ["my invoice is wrong"]
          technical: ["the app crashes"]
      specialists:
        - id: billing
          source: catalogue://gemma3-270m
          footprint: 400MB
        - id: technical
          source: catalogue://gemma3-270m
          footprint: 400MB
          co_activation: router
    routing:
      entry: router
      dispatch_rule: router.output.intent -> specialists.{intent}
    """
)


def test_spec_example_parses_unchanged() -> None:
    manifest = load_manifest(SPEC)
    assert manifest.cluster == "customer-support-agent"
    assert manifest.model_ids == ("router", "billing", "technical", "legal", "fallback")
    assert manifest.resources.gpu_budget == 18 * 10**9
    assert manifest.resources.ram_budget == 32 * 10**9
    assert manifest.router.priority is Priority.CRITICAL
    assert manifest.router.max_active_sessions == 16
    assert manifest.model("legal").tier is Tier.STANDBY
    assert manifest.model("legal").promotion_hint == "on_router_classification"
    assert manifest.model("billing").co_activation == "router"
    assert manifest.fallback is not None
    assert manifest.fallback.tier is Tier.REMOTE
    assert manifest.routing.dispatch_rule.by_intent
    assert manifest.text == SPEC.read_text()
    assert {spec.device for spec in manifest.models} == {DeviceRequirement.ANY}  # no device asked: anywhere


def test_dispatch_resolution_by_intent_and_fallback() -> None:
    manifest = load_manifest(SPEC)
    assert manifest.dispatch_target("technical") == "technical"
    assert manifest.dispatch_target("weather") == "fallback"
    assert manifest.dispatch_target(None) == "fallback"


def test_fixed_route_and_no_fallback_answers_with_entry() -> None:
    text = GOOD.replace("specialists.{intent}", "specialists.billing")
    manifest = parse_manifest(text)
    assert manifest.dispatch_target("technical") == "billing"
    assert parse_manifest(GOOD).dispatch_target("weather") == "router"


def test_extensions_are_typed() -> None:
    manifest = parse_manifest(
        GOOD
        + textwrap.dedent(
            """\
            lru: {idle_threshold: 2m, min_lifetime: 500ms, sweep_interval: 1s}
            drain: {timeout: 10s, admission_wait: 2s}
            """
        )
    )
    assert manifest.lru.idle_threshold == 120.0
    assert manifest.lru.min_lifetime == 0.5
    assert manifest.drain.timeout == 10.0
    assert manifest.router.intents[0] == ("billing", ("my invoice is wrong",))
    assert manifest.intent_labels == ("billing", "technical")
    assert manifest.resources.ram_budget == int(1.5 * 2**30)


def test_the_weight_format_is_chosen_per_model_and_a_change_reloads_it() -> None:
    text = GOOD.replace(
        "      footprint: 400MB\n    - id: technical",
        "      footprint: 400MB\n      quantization: int4\n    - id: technical",
        1,
    )
    manifest = parse_manifest(text)
    assert manifest.models[1].quantization is WeightFormat.INT4
    assert {spec.quantization for spec in manifest.models if spec.id != manifest.models[1].id} == {None}
    assert diff_manifests(parse_manifest(GOOD), manifest).replaced == (manifest.models[1].id,)


def _problem(text: str) -> tuple[str, str, int | None]:
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "m.yaml")
    problem = info.value.problems[0]
    return problem.path, problem.message, problem.line


CASES = [
    # (anchor in GOOD, replacement, key path, message fragment, line)
    pytest.param(
        "cluster: demo\n",
        "cluster: demo\nreplicas: 3\n",
        "replicas",
        "unknown key 'replicas' in the manifest; valid keys: 'cluster'",
        2,
        id="unknown-top-level-key",
    ),
    pytest.param(
        "    priority: critical\n",
        "    priority: critical\n    color: red\n",
        "models.router.color",
        "unknown key 'color' in the router; valid keys: 'source'",
        10,
        id="unknown-model-key",
    ),
    pytest.param(
        "    - id: technical\n",
        "    - id: billing\n",
        "models.specialists[1].id",
        "duplicate id 'billing' (first declared at models.specialists[0])",
        17,
        id="duplicate-id",
    ),
    pytest.param(
        "  entry: router\n",
        "  entry: gatekeeper\n",
        "routing.entry",
        "entry model 'gatekeeper' is not declared; declared models: 'router', 'billing' or 'technical'",
        22,
        id="entry-unknown",
    ),
    pytest.param("  entry: router\n", "", "routing", "routing is missing required key 'entry'", 21, id="entry-absent"),
    pytest.param(
        "router.output.intent -> specialists.{intent}",
        "router -> billing",
        "routing.dispatch_rule",
        "malformed dispatch rule 'router -> billing'; expected '<entry>.output.intent -> specialists.{intent}'",
        23,
        id="rule-malformed",
    ),
    pytest.param(
        "router.output.intent -> specialists.{intent}",
        "router.output.intent -> experts.{intent}",
        "routing.dispatch_rule",
        "the rule names the unknown set 'experts'; valid: 'specialists'",
        23,
        id="rule-unknown-set",
    ),
    pytest.param(
        "router.output.intent -> specialists.{intent}",
        "router.output.intent -> specialists.legal",
        "routing.dispatch_rule",
        "the rule routes to unknown specialist 'legal'; specialists: 'billing' or 'technical'",
        23,
        id="rule-unknown-target",
    ),
    pytest.param(
        "router.output.intent -> specialists.{intent}",
        "billing.output.intent -> specialists.{intent}",
        "routing.dispatch_rule",
        "the rule reads 'billing.output.intent' but the entry model is 'router'",
        23,
        id="rule-reads-non-entry",
    ),
    pytest.param(
        "      co_activation: router\n",
        "      co_activation: legal\n",
        "models.specialists[1].co_activation",
        "co_activation names unknown model 'legal'; declared models: 'router', 'billing' or 'technical'",
        20,
        id="co-activation-unknown",
    ),
    pytest.param(
        "      co_activation: router\n",
        "      co_activation: technical\n",
        "models.specialists[1].co_activation",
        "model 'technical' cannot co-activate on itself",
        20,
        id="co-activation-self",
    ),
    pytest.param(
        "  gpu_budget: 2GB\n",
        "  gpu_budget: 300MB\n",
        "resources.gpu_budget",
        "resident models need 400 MB (billing+technical 400 MB) but gpu_budget is 300 MB; raise gpu_budget",
        3,
        id="budget-exceeded",
    ),
    pytest.param(
        "    tier: resident\n",
        "    tier: hot\n",
        "models.router.tier",
        "unknown tier 'hot'; valid: 'resident', 'standby' or 'remote'",
        8,
        id="bad-tier",
    ),
    pytest.param(
        "    priority: critical\n",
        "    priority: urgent\n",
        "models.router.priority",
        "unknown priority 'urgent'; valid: 'critical', 'high', 'normal' or 'low'",
        9,
        id="bad-priority",
    ),
    pytest.param(
        "  ram_budget: 1.5GiB\n",
        "  ram_budget: lots\n",
        "resources.ram_budget",
        "expected a size such as 512MB, 18GB or 1.5GiB",
        4,
        id="bad-size",
    ),
    pytest.param(
        "    - id: billing\n",
        "    - id: router\n",
        "models.specialists[0].id",
        "id 'router' is reserved for the router; choose another",
        14,
        id="reserved-id",
    ),
    pytest.param(
        "      source: catalogue://gemma3-270m\n      footprint: 400MB\n    - id: technical",
        "      footprint: 400MB\n    - id: technical",
        "models.specialists[0]",
        "a specialist is missing required key 'source'",
        14,
        id="source-missing",
    ),
    pytest.param(
        "  gpu_budget: 2GB\n",
        "  gpu_budget: 2GB\n  vram: 3GB\n",
        "resources.vram",
        "unknown key 'vram' in resources; valid keys: 'gpu_budget' or 'ram_budget'",
        4,
        id="unknown-resource-key",
    ),
    pytest.param(
        "cluster: demo\n",
        "cluster: demo\ncluster: again\n",
        "cluster",
        "duplicate key; each key may appear once",
        2,
        id="duplicate-yaml-key",
    ),
    pytest.param(
        "    tier: resident\n",
        "    tier: resident\n    source: https://api.example.com/v1\n",
        "models.router.source",
        "duplicate key",
        9,
        id="duplicate-source-key",
    ),
    pytest.param(
        "      source: catalogue://gemma3-270m\n      footprint: 400MB\n      co_activation",
        "      source: http://h/v1\n      footprint: 400MB\n      co_activation",
        "models.specialists[1].tier",
        "an http(s) endpoint source is served remotely; tier must be 'remote', not 'resident'",
        17,
        id="http-source-not-remote",
    ),
    pytest.param(
        '      billing: ["my invoice is wrong"]\n',
        "      billing: 3\n",
        "models.router.intents.billing",
        "examples of intent 'billing' must be a list of non-empty strings",
        11,
        id="intent-examples",
    ),
    pytest.param(
        "      footprint: 400MB\n    - id: technical",
        '      footprint: 400MB\n      template: "{history}Agent:"\n    - id: technical',
        "models.specialists[0].template",
        "the template has an unknown field {history}; valid fields: {system}, {turns}, {last_user}",
        17,
        id="template-unknown-field",
    ),
    pytest.param(
        "      footprint: 400MB\n    - id: technical",
        '      footprint: 400MB\n      template: "{turns"\n    - id: technical',
        "models.specialists[0].template",
        "write literal braces as {{ and }}",
        17,
        id="template-bad-brace",
    ),
    pytest.param(
        "      footprint: 400MB\n    - id: technical",
        '      footprint: 400MB\n      template: "{turns}A:"\n      turn_template:\n        user: "Q: {text}"\n'
        "    - id: technical",
        "models.specialists[0].turn_template.user",
        "the user turn has an unknown field {text}; valid fields: {content}",
        19,
        id="turn-template-unknown-field",
    ),
    pytest.param(
        "      footprint: 400MB\n    - id: technical",
        '      footprint: 400MB\n      template: "{turns}A:"\n      turn_template:\n        tool: "T: {content}"\n'
        "    - id: technical",
        "models.specialists[0].turn_template.tool",
        "unknown key 'tool' in turn_template; valid keys: 'system', 'user' or 'assistant'",
        19,
        id="turn-template-unknown-role",
    ),
    pytest.param(
        "      footprint: 400MB\n    - id: technical",
        '      footprint: 400MB\n      template: "Q: {last_user}\\nA:"\n      turn_template:\n        user: "Q: {content}"\n'
        "    - id: technical",
        "models.specialists[0].turn_template",
        "turn_template is unused: the template has no {turns} field to place the conversation",
        18,
        id="turn-template-unused",
    ),
    pytest.param(
        "      footprint: 400MB\n    - id: technical",
        "      footprint: 400MB\n      device: tpu\n    - id: technical",
        "models.specialists[0].device",
        "unknown device 'tpu'; valid: 'gpu', 'cpu' or 'any'",
        17,
        id="device-unknown",
    ),
    pytest.param(
        "routing:\n",
        "fallback:\n  source: https://api.example.com/v1\n  tier: remote\n  device: gpu\nrouting:\n",
        "fallback.device",
        "a remote model runs at its endpoint; 'device' (gpu, cpu or any) is for models a worker runs; remove it",
        24,
        id="device-on-a-remote-model",
    ),
    pytest.param(
        "      footprint: 400MB\n    - id: technical",
        "      footprint: 400MB\n      quantization: int3\n    - id: technical",
        "models.specialists[0].quantization",
        "unknown quantization 'int3'; valid: 'int4', 'int8', 'fp16' or 'none'",
        17,
        id="quantization-unknown",
    ),
    pytest.param(
        "routing:\n",
        "fallback:\n  source: https://api.example.com/v1\n  tier: remote\n  quantization: int4\nrouting:\n",
        "fallback.quantization",
        "a remote model's weights are its endpoint's; 'quantization' is for models a worker prepares; remove it",
        24,
        id="quantization-on-a-remote-model",
    ),
]


@pytest.mark.parametrize(("old", "new", "path", "message", "line"), CASES)
def test_bad_manifest_names_path_line_and_what_is_valid(old: str, new: str, path: str, message: str, line: int) -> None:
    assert old in GOOD, "the test's anchor text must occur in the good manifest"
    text = GOOD.replace(old, new, 1)
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "m.yaml")
    rendered = str(info.value)
    matching = [p for p in info.value.problems if p.path == path and message in p.message]
    assert matching, rendered
    assert matching[0].line == line, rendered
    assert f"m.yaml:{line}: {path}: " in rendered


def test_a_conversation_template_is_typed() -> None:
    text = GOOD.replace(
        "      footprint: 400MB\n    - id: technical",
        '      footprint: 400MB\n      template: "Be brief.\\n\\n{turns}Agent:"\n'
        '      turn_template: {user: "Customer: {content}\\n", assistant: "Agent: {content}\\n\\n"}\n'
        "    - id: technical",
    )
    billing = parse_manifest(text).model("billing")
    assert billing.template == "Be brief.\n\n{turns}Agent:"
    assert billing.turn_template == TurnTemplate(user="Customer: {content}\n", assistant="Agent: {content}\n\n")
    # a router's template may be its classification prompt instead
    router = GOOD.replace("    tier: resident\n", '    tier: resident\n    template: "{labels}: {text}"\n', 1)
    assert parse_manifest(router).router.template == "{labels}: {text}"


def test_yaml_syntax_error_has_line() -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest("cluster: demo\nmodels: [unclosed\n", "m.yaml")
    assert "invalid YAML" in str(info.value)
    assert info.value.problems[0].line is not None


def test_empty_manifest() -> None:
    with pytest.raises(ManifestError, match="the manifest is empty; expected keys 'cluster'"):
        parse_manifest("", "m.yaml")


def test_every_problem_is_reported_at_once() -> None:
    text = GOOD.replace("tier: resident", "tier: hot").replace("priority: critical", "priority: urgent")
    with pytest.raises(ManifestError) as info:
        parse_manifest(text)
    assert len(info.value.problems) == 2


def test_cli_check_valid_and_invalid(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(cli, ["manifest", "check", "--no-sources", str(SPEC)])  # its hf:// sources are not here
    assert ok.exit_code == 0, ok.output
    assert "customer-support-agent" in ok.output
    assert "router.output.intent -> specialists.{intent}" in ok.output
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text(GOOD.replace("tier: resident", "tier: hot").replace("cluster: demo\n", "cluster: demo\nx: 1\n"))
    bad = runner.invoke(cli, ["manifest", "check", str(bad_file)])
    assert bad.exit_code == 2
    assert f"{bad_file}:2: x: unknown key 'x'" in bad.output
    assert f"{bad_file}:9: models.router.tier: unknown tier 'hot'" in bad.output
    assert "2 problem(s)" in bad.output
    missing = runner.invoke(cli, ["manifest", "check", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2
    assert "cannot read the manifest" in missing.output


@pytest.mark.parametrize("path", sorted((ROOT / "manifests").glob("*.yaml")), ids=lambda p: p.name)
def test_the_example_manifests_pass_the_check(path: Path) -> None:
    checked = CliRunner().invoke(cli, ["manifest", "check", str(path)])
    assert checked.exit_code == 0, checked.output
    manifest = load_manifest(path)
    assert manifest.routing.entry == "router"
    assert len(manifest.intent_labels) >= 3
    answering = [spec for spec in manifest.models if spec.id != "router" or spec.source == "catalogue://gemma3-270m"]
    assert all(spec.template for spec in answering)  # Gemma is a base model: whatever answers gets a prompt
    # and the prompt is the whole conversation, one turn_template line per message
    assert all(spec.template and "{turns}" in spec.template and spec.turn_template for spec in answering)
