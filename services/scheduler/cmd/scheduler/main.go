// Command scheduler runs Loom's scheduler service against an existing Kafka and Redis.
// Flags and LOOM_* environment variables configure it; see -help.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/loom-ml/loom/services/scheduler"
)

func main() {
	var cfg scheduler.Config
	fs := flag.NewFlagSet("scheduler", flag.ExitOnError)
	cfg.RegisterFlags(fs)
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := scheduler.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(1)
	}
}
