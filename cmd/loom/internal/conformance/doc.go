// Package conformance holds Loom's Slurm conformance suite (its tests; this
// package has no code of its own). Real batch scripts (testdata/*.sh) are
// submitted through the real commands — the loom binary, built once per run
// and started as sbatch, squeue, sacct, scontrol, scancel and sinfo through
// symbolic links, exactly as a login shell runs them — against an embedded
// Loom (internal/stack) whose node agents are real processes. The tests
// check job states, the scripts' outputs and environments, and the
// commands' output against Slurm 22.05's formats: headers byte for byte,
// rows parsed.
//
// Run it with
//
//	go test ./cmd/loom/internal/conformance/ -count=1 -v
//
// LOOM_CONFORMANCE_LOOM=/path/to/loom uses a binary built beforehand instead
// of building one. The suite is skipped with -short. See docs/slurm.md.
//
// LOOM_CONFORMANCE_BACKEND=slurm (make conformance-slurm) runs it on the
// scheduler's real-Slurm backend instead, against a real Slurm the fixture
// starts (scripts/slurm-local.sh); each test that needs what that backend
// refuses is skipped there, naming it (docs/slurm-backend.md, "Conformance").
package conformance
