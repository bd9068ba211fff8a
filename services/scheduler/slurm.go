package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/topics"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/adapters"
	"github.com/loom-ml/loom/services/scheduler/internal/ports"
	"github.com/loom-ml/loom/services/scheduler/internal/slurmbackend"
)

// runSlurm runs the scheduler on the Slurm backend (-backend=slurm): the
// same service, reads and leader lease as the built-in engine, but the
// leader forwards job commands to slurmrestd and polls Slurm's job list
// instead of placing jobs (docs/slurm-backend.md).
func runSlurm(ctx context.Context, cfg Config) error {
	internal, err := service.InternalAuth(cfg.Common)
	if err != nil {
		return err
	}
	base, err := service.New(ctx, "scheduler", cfg.Common, internal...)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		_ = base.Close()
		return fmt.Errorf("scheduler: %w", err)
	}
	signer, err := slurmbackend.LoadSigner(cfg.Slurm.JWTKey, cfg.Slurm.TokenLifespan, base.Clock.Now)
	if err != nil {
		return fail(err)
	}
	b, err := slurmbackend.New(base.Store, slurmbackend.Config{URL: cfg.Slurm.URL, Signer: signer,
		ReadUser: cfg.Slurm.ReadUser, Poll: cfg.Slurm.Poll, MinJobAge: cfg.MinJobAge,
		AllowRootJobs: cfg.Slurm.AllowRootJobs, RefusedOwners: cfg.Slurm.RefusedOwners}, base.Clock.Now, base.Log)
	if err != nil {
		return fail(err)
	}
	b.StepDown()
	if err := b.Refresh(ctx); err != nil {
		return fail(err)
	}
	loomv1.RegisterJobServiceServer(base.GRPC, ports.NewJobServer(b))
	loomv1.RegisterSlurmServiceServer(base.GRPC, slurmbackend.SlurmServer{})
	l := &leader{cfg: cfg, base: base, lease: adapters.NewLease(base.Store, cfg.InstanceID, cfg.LeaseTTL)}
	base.Log.Info("scheduler backend: slurm", "slurmrestd", cfg.Slurm.URL, "poll", cfg.Slurm.Poll.String())
	return base.Run(ctx, nil, func(ctx context.Context) error { return l.runSlurm(ctx, b) })
}

// runSlurm is run's election for the Slurm backend: followers refresh
// their reads from Redis; the leader consumes the job commands, polls
// Slurm and renews the lease.
func (l *leader) runSlurm(ctx context.Context, b *slurmbackend.Backend) error {
	log := l.base.Log
	last := time.Time{}
	for {
		token, err := l.lease.TryAcquire(ctx)
		if err != nil && ctx.Err() == nil {
			log.Warn("leader lease: acquire failed; retrying", "err", err)
		}
		if token != "" {
			l.slurmTerm(ctx, b, token)
			last = time.Time{}
		} else if time.Since(last) >= l.cfg.RefreshInterval {
			if err := b.Refresh(ctx); err != nil && ctx.Err() == nil {
				log.Warn("follower refresh failed", "err", err)
			}
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(min(l.cfg.LeaseTTL/3, l.cfg.RefreshInterval)):
		}
	}
}

// slurmTerm leads for one term: the consumer of loom.job.commands.v1
// (the only topic this backend reads: nodes, health and steps are
// Slurm's), the poll and the lease renewal, until ctx ends, the lease is
// lost or a write is fenced.
func (l *leader) slurmTerm(ctx context.Context, b *slurmbackend.Backend, token string) {
	log := l.base.Log.With("term", token)
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer func() {
		b.StepDown()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer rcancel()
		if err := l.lease.Release(rctx, token); err != nil {
			log.Warn("leader lease: release failed; it expires by itself", "err", err)
		}
	}()
	if err := b.Lead(tctx, token, cancel); err != nil {
		log.Error("could not take over as leader", "err", err)
		return
	}
	cons := bus.NewConsumer(bus.ConsumerConfig{Brokers: l.cfg.Brokers, GroupID: "loom-scheduler", Topics: []string{topics.JobCommands},
		Logger: l.base.Log, Verifier: l.base.Verifier, Rejected: l.base.Rejected, Security: l.base.Kafka,
		SessionTimeout: l.base.Config.BusSessionTimeout, Metrics: l.base.Bus,
		TracerProvider: l.base.Telemetry.TracerProvider}, l.base.Producer, b.Handle)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		defer cancel()
		if err := cons.Run(tctx); err != nil {
			log.Error("consumer failed", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		defer cancel()
		_ = b.RunPoll(tctx)
	}()
	go func() {
		defer wg.Done()
		defer cancel()
		l.renew(tctx, token)
	}()
	wg.Wait()
}
