package paging

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/errs"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func clusters(n int) []*loomv1.Cluster {
	out := make([]*loomv1.Cluster, n)
	for i := range out {
		out[i] = &loomv1.Cluster{Name: fmt.Sprintf("projects/p/clusters/c%04d", n-1-i)} // reverse order: List sorts
	}
	return out
}

func TestListPagesThroughInKeyOrder(t *testing.T) {
	t.Parallel()
	items := clusters(250)
	req := &loomv1.ListClustersRequest{Parent: "projects/p", PageSize: 7}
	var names []string
	err := Each(func(token string) (string, error) {
		req.PageToken = token
		page, next, err := List(req, items, (*loomv1.Cluster).GetName)
		for _, c := range page {
			names = append(names, c.GetName())
		}
		return next, err
	})
	if err != nil || len(names) != 250 {
		t.Fatalf("read %d items (%v), want 250", len(names), err)
	}
	for i, n := range names {
		if want := fmt.Sprintf("projects/p/clusters/c%04d", i); n != want {
			t.Fatalf("item %d is %s, want %s (each once, in key order)", i, n, want)
		}
	}
}

func TestPageSizes(t *testing.T) {
	t.Parallel()
	items := clusters(MaxSize + 10)
	for _, tc := range []struct {
		size int32
		want int
	}{{0, DefaultSize}, {3, 3}, {MaxSize + 1, MaxSize}, {1 << 30, MaxSize}} {
		page, next, err := List(&loomv1.ListClustersRequest{PageSize: tc.size}, items, (*loomv1.Cluster).GetName)
		if err != nil || len(page) != tc.want || next == "" {
			t.Errorf("page_size %d: %d items, next %q, %v; want %d and a next page", tc.size, len(page), next, err, tc.want)
		}
	}
	_, _, err := List(&loomv1.ListClustersRequest{PageSize: -1}, items, (*loomv1.Cluster).GetName)
	var inv *errs.InvalidError
	if !errors.As(err, &inv) || inv.Violations[0].Field != "page_size" {
		t.Fatalf("page_size -1: %v; want InvalidArgument naming page_size", err)
	}
}

func TestTokenIsBoundToTheRequest(t *testing.T) {
	t.Parallel()
	items := clusters(10)
	req := &loomv1.ListClustersRequest{Parent: "projects/p", PageSize: 2}
	_, next, err := List(req, items, (*loomv1.Cluster).GetName)
	if err != nil || next == "" {
		t.Fatalf("first page: next %q, %v", next, err)
	}
	// Another page size with the same token is fine: it is not a filter.
	if _, _, err := List(&loomv1.ListClustersRequest{Parent: "projects/p", PageSize: 5, PageToken: next}, items,
		(*loomv1.Cluster).GetName); err != nil {
		t.Fatalf("same request, other page size: %v", err)
	}
	for name, tc := range map[string]*loomv1.ListClustersRequest{
		"other filters": {Parent: "projects/q", PageToken: next},
		"not base64":    {Parent: "projects/p", PageToken: "!!!"},
		"too short":     {Parent: "projects/p", PageToken: "AQ"},
		"too long":      {Parent: "projects/p", PageToken: strings.Repeat("A", MaxTokenLen+1)},
	} {
		_, _, err := List(tc, items, (*loomv1.Cluster).GetName)
		var inv *errs.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != "page_token" {
			t.Errorf("%s: %v; want InvalidArgument naming page_token", name, err)
		}
	}
	// A token of one list is refused by another even with equal fields.
	if _, _, err := Parse(&loomv1.ListReservationsRequest{Parent: "projects/p", PageToken: next}); err == nil {
		t.Error("a clusters token was accepted by ListReservations")
	}
}

// TestTokenKey: a token's key reads back whatever request it was made for;
// what Token did not make is an error.
func TestTokenKey(t *testing.T) {
	t.Parallel()
	key := JobKey(&loomv1.Job{Name: "projects/p/jobs/12", JobId: "12"})
	if got, err := TokenKey(Token(&loomv1.ListJobsRequest{Parent: "projects/p", Users: []string{"ana"}}, key)); err != nil || got != key {
		t.Errorf("TokenKey: %q, %v; want %q", got, err, key)
	}
	for _, tok := range []string{"", "!!!", "AQ", strings.Repeat("A", MaxTokenLen+1)} {
		if _, err := TokenKey(tok); err == nil {
			t.Errorf("TokenKey(%.20q) read a key", tok)
		}
	}
}

// TestTokenIsStableAcrossChanges: items added before the token's key do not
// shift the next page; those after it are listed.
func TestTokenIsStableAcrossChanges(t *testing.T) {
	t.Parallel()
	items := clusters(6) // c0000..c0005
	req := &loomv1.ListClustersRequest{PageSize: 3}
	first, next, _ := List(req, items, (*loomv1.Cluster).GetName)
	if len(first) != 3 || first[2].GetName() != "projects/p/clusters/c0002" {
		t.Fatalf("first page %v", first)
	}
	items = append(items, &loomv1.Cluster{Name: "projects/p/clusters/b"}, &loomv1.Cluster{Name: "projects/p/clusters/c0003a"})
	req.PageToken, req.PageSize = next, 10
	second, last, err := List(req, items, (*loomv1.Cluster).GetName)
	if err != nil || last != "" {
		t.Fatalf("second page: next %q, %v", last, err)
	}
	var got []string
	for _, c := range second {
		got = append(got, strings.TrimPrefix(c.GetName(), "projects/p/clusters/"))
	}
	if strings.Join(got, ",") != "c0003,c0003a,c0004,c0005" {
		t.Fatalf("second page %v; want c0003,c0003a,c0004,c0005 (b, before the token, is not listed)", got)
	}
}

// TestPagesAreBoundedByBytes: items big enough that a page of the default
// size would pass gRPC's 4 MB come in pages under MaxBytes, all of them.
func TestPagesAreBoundedByBytes(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 200<<10)
	var jobs []*loomv1.Job
	for i := range 30 { // 6 MB in all
		jobs = append(jobs, &loomv1.Job{Name: fmt.Sprintf("projects/p/jobs/%d", i+1), JobId: fmt.Sprint(i + 1), Env: map[string]string{"BIG": big}})
	}
	req := &loomv1.ListJobsRequest{Parent: "projects/p"}
	seen, pages := 0, 0
	err := Each(func(token string) (string, error) {
		req.PageToken = token
		page, next, err := List(req, jobs, JobKey)
		size := 0
		for _, j := range page {
			size += len(j.GetEnv()["BIG"])
		}
		if size > MaxBytes || len(page) == 0 {
			t.Errorf("page of %d jobs, %d bytes; want 1 or more and at most %d", len(page), size, MaxBytes)
		}
		seen += len(page)
		pages++
		return next, err
	})
	if err != nil || seen != 30 || pages < 6 {
		t.Fatalf("read %d jobs in %d pages (%v); want 30 in 6 or more", seen, pages, err)
	}
	// One item larger than a page still comes, alone.
	huge := []*loomv1.Job{{Name: "projects/p/jobs/1", JobId: "1", Env: map[string]string{"A": strings.Repeat("y", MaxBytes+1)}},
		{Name: "projects/p/jobs/2", JobId: "2"}}
	page, next, _ := List(&loomv1.ListJobsRequest{}, huge, JobKey)
	if len(page) != 1 || next == "" {
		t.Fatalf("an item over MaxBytes: page of %d, next %q; want it alone, then the rest", len(page), next)
	}
}

func TestJobKeyOrdersByNumber(t *testing.T) {
	t.Parallel()
	a := JobKey(&loomv1.Job{Name: "projects/p/jobs/9", JobId: "9"})
	b := JobKey(&loomv1.Job{Name: "projects/p/jobs/10", JobId: "10"})
	if a >= b {
		t.Fatalf("JobKey(9) %q >= JobKey(10) %q", a, b)
	}
}

func TestOrderedKeepsTheListsOrder(t *testing.T) {
	t.Parallel()
	items := clusters(5) // c0004..c0000: not sorted, and Ordered must not sort
	req := &loomv1.ListClustersRequest{PageSize: 2}
	var got []string
	err := Each(func(token string) (string, error) {
		req.PageToken = token
		page, next, err := Ordered(req, items)
		for _, c := range page {
			got = append(got, strings.TrimPrefix(c.GetName(), "projects/p/clusters/"))
		}
		return next, err
	})
	if err != nil || strings.Join(got, ",") != "c0004,c0003,c0002,c0001,c0000" {
		t.Fatalf("got %v, %v; want the list's own order", got, err)
	}
}

func TestEachStopsOnARepeatedToken(t *testing.T) {
	t.Parallel()
	calls := 0
	err := Each(func(string) (string, error) { calls++; return "same", nil })
	if err == nil || calls != 2 {
		t.Fatalf("a server that repeats its token: %d calls, %v; want an error after the repeat", calls, err)
	}
}
