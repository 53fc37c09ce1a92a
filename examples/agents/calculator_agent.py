"""A small tool-calling agent on the `openai` SDK: the model may call a calculator, the
agent runs it and sends the result back, until the model answers without a tool call.

Nothing in it knows about the flywheel: it reads OPENAI_BASE_URL and OPENAI_API_KEY as any
SDK program does (or takes `base_url`), and returns the model's final answer. Trained
with recipes/cpu-sdk-agent.yaml (`agent.entry: calculator_agent:run`, `agent.path:
examples/agents`), where the flywheel runs it in a sandbox whose only reachable address
is the gateway that records its calls.
"""

import ast
import json
import operator

import openai

TOOLS = [{
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression, e.g. 12 * (3 + 4) / 2.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "the expression"}},
            "required": ["expression"],
        },
    },
}]  # fmt: skip
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
       ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
       ast.USub: operator.neg, ast.UAdd: operator.pos}  # fmt: skip
MAX_STEPS = 4


def calculate(expression: str) -> str:
    """The value of +, -, *, /, //, %, ** over numbers (no names, no calls), or why not."""

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 100:
                raise ValueError("exponent too large")
            return OPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in OPS:
            return OPS[type(node.op)](value(node.operand))
        raise ValueError("only numbers and + - * / // % ** are allowed")

    try:
        result = value(ast.parse(expression.replace("×", "*").replace("÷", "/"), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, TypeError) as exc:
        return f"error: {exc}"
    return str(int(result) if isinstance(result, float) and result.is_integer() else result)


def run(task: dict, base_url: str | None = None) -> str:
    """Answer `task["prompt"]` (chat messages), calling the calculator as the model asks."""
    client = openai.OpenAI(base_url=base_url)
    messages = list(task["prompt"])
    for _ in range(MAX_STEPS):
        reply = (
            client.chat.completions.create(model="policy", messages=messages, tools=TOOLS).choices[0].message
        )
        if not reply.tool_calls:
            return reply.content or ""
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            try:
                expression = str(json.loads(call.function.arguments).get("expression", ""))
            except (ValueError, AttributeError):
                expression = call.function.arguments
            messages.append({"role": "tool", "tool_call_id": call.id, "content": calculate(expression)})
    return reply.content or ""
