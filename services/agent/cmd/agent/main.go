// Command agent runs Loom's agent service against an existing Kafka and Redis.
// Flags and LOOM_* environment variables configure it; see -help.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/loom-ml/loom/services/agent"
)

func main() {
	var cfg agent.Config
	fs := flag.NewFlagSet("agent", flag.ExitOnError)
	cfg.RegisterFlags(fs)
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := agent.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}
