// Command loom is Loom's command line: it manages clusters, reservations,
// jobs and models through the gateway, and runs Loom itself on this machine
// (`loom up`, `loom demo`). Started under a Slurm command's name (sbatch,
// squeue, ...; `loom clusters login` links them), it runs `loom slurm NAME`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/loom-ml/loom/cmd/loom/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, cli.Args(os.Args[0], os.Args[1:]), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
