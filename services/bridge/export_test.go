package bridge

import "github.com/loom-ml/loom/libs/config"

// parseForTest reads a command line as RunArgs does, without running.
func parseForTest(args []string) (Config, error) {
	return config.ParseArgs("bridge", args, (*Config).RegisterFlags)
}
