package runner

const crashChildEnv = "REVIEWLEDGER_RUNNER_CRASH_CHILD"

func crashChild() int { return 0 }
