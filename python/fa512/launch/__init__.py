"""Running a call: `run` (the op's body), the warm-call memo of launchers (`memo`) and its C++
form (`native`)."""
