package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/services/gateway/internal/app"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
	"github.com/loom-ml/loom/services/gateway/internal/guard"
)

func TestLimitsFlags(t *testing.T) {
	t.Parallel()
	cfg, err := config.ParseArgs("gateway", []string{"-project-quotas", "p1=nodes:16,gpus:64", "-quota-clusters", "5",
		"-max-submit-jobs", "-1", "-rate", "5", "-burst", "7", "-max-watches", "3", "-audit-retention", "24h"}, (*Config).RegisterFlags)
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Limits
	if l.Rate != 5 || l.Burst != 7 || l.MaxWatches != 3 || l.QuotaNodes != domain.DefaultQuotaNodes {
		t.Errorf("limits %+v", l)
	}
	q, a, err := l.options()
	if err != nil {
		t.Fatal(err)
	}
	if p1, _ := q.Quotas.For("p1"); p1 != (domain.Quota{Nodes: 16, GPUs: 64, Clusters: 5, PendingJobs: domain.DefaultQuotaPendingJobs, Training: domain.DefaultQuotaTraining}) {
		t.Errorf("p1's quota %+v", p1)
	}
	if q.MaxSubmitJobs != -1 || a.Retention != 24*time.Hour || a.MaxRecords != app.DefaultAuditMaxRecords {
		t.Errorf("quota options %+v, audit %+v", q, a)
	}
	// The defaults, without flags.
	def, err := config.ParseArgs("gateway", nil, (*Config).RegisterFlags)
	if err != nil {
		t.Fatal(err)
	}
	if d := def.Limits; d.Rate != guard.DefaultRate || d.Burst != guard.DefaultBurst || d.MaxWatches != guard.DefaultMaxWatches ||
		d.QuotaPendingJobs != domain.DefaultQuotaPendingJobs || d.QuotaTraining != domain.DefaultQuotaTraining || d.MaxSubmitJobs != domain.DefaultMaxSubmitJobs {
		t.Errorf("default limits %+v", d)
	}
}

func TestBadProjectQuotasStopTheStart(t *testing.T) {
	t.Parallel()
	err := Run(context.Background(), Config{Limits: Limits{ProjectQuotas: "p1=cpus:4"}})
	if err == nil || !strings.Contains(err.Error(), `project-quotas: project quotas: p1: unknown kind "cpus"`) {
		t.Errorf("start with a bad -project-quotas: %v", err)
	}
}
