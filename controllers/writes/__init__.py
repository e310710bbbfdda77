"""How the controller writes to the Kubernetes API: `raw` sends JSON bytes over kept-alive
connections of its own (the hot writes; and `write` for the rarer calls through the generated
client), `background` runs writes beside the work that made them, `dataset` is the dataset
controller's calls and what their failures mean."""
