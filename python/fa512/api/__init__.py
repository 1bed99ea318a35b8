"""The public entry points: `fa512.attention` and `fa512.plan` (`attention`), and the torch op
``torch.ops.fa512.fwd`` (`op`). Both run through `fa512.launch.run`."""
