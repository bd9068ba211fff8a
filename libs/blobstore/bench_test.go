package blobstore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkExport copies a 64 MiB artifact set (16 objects of 4 MiB)
// between two file:// buckets; the second benchmark re-exports it onto
// itself, where every object is checked and skipped.
//
//	go test -run '^$' -bench Export -benchtime 5x ./libs/blobstore
func BenchmarkExport(b *testing.B) {
	sizes := map[string]int{}
	for i := range 16 {
		sizes[fmt.Sprintf("model/shard-%02d.bin", i)] = 4 << 20
	}
	ctx := context.Background()
	src := open(b, filepath.Join(b.TempDir(), "src"))
	artifacts(b, src, sizes)
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(64 << 20)
		for i := 0; i < b.N; i++ {
			dst := open(b, filepath.Join(b.TempDir(), fmt.Sprint(i)))
			if res, err := Export(ctx, src, dst, ExportOptions{}); err != nil || res.Copied != 16 {
				b.Fatal(res, err)
			}
		}
	})
	b.Run("skip", func(b *testing.B) {
		dst := open(b, filepath.Join(b.TempDir(), "dst"))
		if _, err := Export(ctx, src, dst, ExportOptions{}); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(64 << 20)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if res, err := Export(ctx, src, dst, ExportOptions{}); err != nil || res.Skipped != 16 {
				b.Fatal(res, err)
			}
		}
	})
}
