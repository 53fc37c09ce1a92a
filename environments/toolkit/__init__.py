"""The tool-calling kit of multi-turn domains: the tools' specs, the parser of the model's
calls and their execution in a sandbox workspace (tools.py), how each model family writes
a call (tool_formats.py), and what a multi-turn domain adds to Environment with the
process rewards its episodes share (agentic.py). The episode runner that plays them is
flywheel.tasks.multiturn; the gateway reads calls through tool_formats too."""
