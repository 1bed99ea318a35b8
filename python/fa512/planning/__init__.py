"""From a call to a decision: validation (`validate`) into the checked problem (`problem`, with
`descales`), the split model (`splits`) and the dispatch table (`dispatch`) that picks the
kernel, its config and the split count. Nothing here reads device memory."""
