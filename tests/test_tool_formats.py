"""Tool calls of other model families (environments/toolkit/tool_formats.py): each format parsed,
rendered and detected from a chat template, and a whole multi-turn episode per format:
the domain's reference calls written in the family's format, tokenized by a real
tokenizer, parsed, run in the real sandbox, their results rendered back by the template.

Tokenizers and templates: SmolLM2's own (Hermes in the system prompt) and, on SmolLM2's
tokenizer, Qwen 2.5's published template (Hermes with `tools=`, as shipped in TRL's
chat_templates); Mistral's own v3 tokenizer as shipped in mistral_common (converted to a
Hugging Face tokenizer, its control tokens kept) with a v3 tool template written after
Mistral's (tests/data); Llama 3.1's published template (TRL's copy) on SmolLM2's
tokenizer, since Llama 3's tokenizer is not available offline."""

from pathlib import Path

import pytest

from flywheel.environments import get_environment
from flywheel.environments.toolkit.tool_formats import BY_NAME, detect, pick, template_has_tools
from flywheel.environments.toolkit.tools import InvalidCall, ToolCall, parse_tool_calls

DATA = Path(__file__).parent / "data"


def trl_template(name: str) -> str:
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text()


MISTRAL_CONTROL = ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                   "[/TOOL_RESULTS]"]  # fmt: skip


def test_llama3_json_calls():
    fmt = BY_NAME["llama3_json"]
    assert parse_tool_calls('{"name": "run_shell", "parameters": {"command": "ls"}}', None, fmt) == [
        ToolCall("run_shell", {"command": "ls"})
    ]
    two = '<|python_tag|>{"name": "run_shell", "parameters": {"command": "a; b"}}; {"name": "submit", "parameters": {}}'
    assert parse_tool_calls(two, None, fmt) == [
        ToolCall("run_shell", {"command": "a; b"}),
        ToolCall("submit", {}),
    ]
    assert parse_tool_calls("I would list the files first.", None, fmt) == []
    [bad] = parse_tool_calls('{"name": "run_shell", "parameters": {"command": ', None, fmt)
    assert isinstance(bad, InvalidCall) and "not valid JSON" in bad.reason


def test_mistral_calls_v3_and_v11():
    fmt = BY_NAME["mistral"]
    v3 = '[TOOL_CALLS] [{"name": "read_file", "arguments": {"path": "a.py"}}, {"name": "submit", "arguments": {}}]</s>'
    assert parse_tool_calls(v3, None, fmt) == [
        ToolCall("read_file", {"path": "a.py"}),
        ToolCall("submit", {}),
    ]
    v11 = '[TOOL_CALLS]read_file[ARGS]{"path": "a.py"}[TOOL_CALLS]submit[ARGS]{}'
    assert parse_tool_calls(v11, None, fmt) == [
        ToolCall("read_file", {"path": "a.py"}),
        ToolCall("submit", {}),
    ]
    [bad] = parse_tool_calls('[TOOL_CALLS] [{"name": "read_file", "arguments": {"path": 3}}]', None, fmt)
    assert isinstance(bad, InvalidCall) and "must be strings" in bad.reason
    [bad] = parse_tool_calls("[TOOL_CALLS] [{oops", None, fmt)
    assert isinstance(bad, InvalidCall)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_render_parses_back_and_other_formats_never_crash_on_it(name):
    calls = [
        {"name": "write_file", "arguments": {"path": "x.py", "content": 'print("a;b")'}},
        {"name": "submit"},
    ]
    text = BY_NAME[name].render(calls)
    assert parse_tool_calls(text, None, BY_NAME[name]) == [
        ToolCall("write_file", {"path": "x.py", "content": 'print("a;b")'}),
        ToolCall("submit", {}),
    ]
    for other in set(BY_NAME) - {name}:  # a format the parser does not know: no call, never a crash
        assert all(
            isinstance(c, (ToolCall, InvalidCall)) for c in parse_tool_calls(text, None, BY_NAME[other])
        )


def test_detect_from_templates(tiny_model):
    from transformers import AutoTokenizer

    smol = AutoTokenizer.from_pretrained(tiny_model)
    assert pick(smol).name == "hermes" and not template_has_tools(smol)
    assert detect((DATA / "mistral_v3_tools.jinja").read_text()).name == "mistral"
    assert detect(trl_template("llama3_1")).name == "llama3_json"
    assert detect(trl_template("qwen2_5")).name == "hermes"
    assert pick(smol, "mistral").name == "mistral"
    with pytest.raises(ValueError, match="unknown tool-call format 'xml'"):
        pick(smol, "xml")


def mistral_tokenizer():
    """Mistral's v3 tokenizer from mistral_common's package data, as an HF tokenizer."""
    import mistral_common
    from transformers import LlamaTokenizerFast

    model = Path(mistral_common.__file__).parent / "data" / "mistral_instruct_tokenizer_240323.model.v3"
    tok = LlamaTokenizerFast(vocab_file=str(model), legacy=False, add_bos_token=False)
    tok.add_special_tokens({"additional_special_tokens": MISTRAL_CONTROL})
    assert tok.convert_tokens_to_ids("[TOOL_CALLS]") < 32768  # its own control token, not a new one
    tok.chat_template = (DATA / "mistral_v3_tools.jinja").read_text()
    return tok


def smol_with_template(tiny_model, name: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    tok.chat_template = trl_template(name)
    return tok


@pytest.fixture(scope="module")
def box():
    from flywheel.environments.sandbox import make_sandbox
    from flywheel.config import SandboxConfig

    sandbox = make_sandbox(SandboxConfig(concurrency=2))
    yield sandbox
    sandbox.close()


@pytest.mark.parametrize("family", ["hermes", "qwen2_5", "mistral", "llama3_json"])
def test_a_whole_episode_in_each_family_format(family, tiny_model, box):
    from transformers import AutoTokenizer

    from flywheel.tasks.multiturn import play_reference

    tok = {"hermes": lambda: AutoTokenizer.from_pretrained(tiny_model), "mistral": mistral_tokenizer,
           "qwen2_5": lambda: smol_with_template(tiny_model, "qwen2_5"),
           "llama3_json": lambda: smol_with_template(tiny_model, "llama3_1")}[family]()  # fmt: skip
    assert pick(tok).name == {"qwen2_5": "hermes"}.get(family, family)  # picked from the template ("auto")
    env = get_environment("repair")
    task = env.make_tasks("train", 1, 3, 1)[0]
    ep = play_reference(tok, box, task, env, env.reference(task), max_tokens=8192)
    assert ep.score.verdict == "pass" and ep.finish_reason == "submit", (ep.score, ep.steps[-1:])
    assert all("invalid" not in s["action"] for s in ep.steps)
    system = ep.messages[0]["content"]
    written = tok.decode(ep.completion_token_ids, skip_special_tokens=False)
    if family == "mistral":
        assert ep.tools and "<tools>" not in system  # the template renders the tools itself
        assert "[TOOL_CALLS]" in written and "[TOOL_RESULTS]" in written
        assert tok.convert_tokens_to_ids("[TOOL_CALLS]") in ep.completion_token_ids  # one control token
    elif family == "llama3_json":
        assert ep.tools and '"parameters"' in written and "<|start_header_id|>ipython" in written
    elif family == "qwen2_5":  # Hermes calls, the tool list rendered by the template
        assert (
            ep.tools and "<tools>" not in system and "<tool_call>" in written and "<tool_response>" in written
        )
    else:
        assert ep.tools is None and "<tools>" in system and "<tool_call>" in written
