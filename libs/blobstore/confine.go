package blobstore

import (
	"context"
	"errors"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"

	"github.com/loom-ml/loom/libs/errs"
)

// confined is a driver.Bucket that keeps every key under prefix of base.
// It is gocloud's prefixed bucket (driver.NewPrefixedBucket) with one
// difference that matters: the key is encoded first (see encodeKey), so no
// key, however hostile, can name a parent, the store's root, or another
// tenant's prefix on any store: "." and ".." segments, empty segments and
// the characters a store or file system could interpret never reach base.
//
// It wraps the portable *blob.Bucket rather than a driver.Bucket because
// go-cloud's URL openers hand out only the portable type. Being a
// driver.Bucket is what lets go-cloud's own conformance suite
// (gocloud.dev/blob/drivertest) run against exactly what Loom uses.
type confined struct {
	base   *blob.Bucket
	prefix string // "" or ends with "/"; already encoded (encodePrefix)
	owns   bool   // Close closes base
}

var _ driver.Bucket = (*confined)(nil)

func (c *confined) key(k string) string { return c.prefix + encodeKey(k) }

func (c *confined) ErrorCode(err error) gcerrors.ErrorCode {
	var inv *errs.InvalidError
	if errors.As(err, &inv) {
		return gcerrors.InvalidArgument
	}
	return gcerrors.Code(err)
}

func (c *confined) As(i any) bool                 { return c.base.As(i) }
func (c *confined) ErrorAs(err error, i any) bool { return c.base.ErrorAs(err, i) }

func (c *confined) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	a, err := c.base.Attributes(ctx, c.key(key))
	if err != nil {
		return nil, err
	}
	return &driver.Attributes{
		CacheControl:       a.CacheControl,
		ContentDisposition: a.ContentDisposition,
		ContentEncoding:    a.ContentEncoding,
		ContentLanguage:    a.ContentLanguage,
		ContentType:        a.ContentType,
		Metadata:           a.Metadata,
		CreateTime:         a.CreateTime,
		ModTime:            a.ModTime,
		Size:               a.Size,
		MD5:                a.MD5,
		ETag:               a.ETag,
		AsFunc:             a.As,
	}, nil
}

// defaultPageSize is what a list page holds when the caller gives no size.
const defaultPageSize = 1000

func (c *confined) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	enc, exact := encodeListPrefix(opts.Prefix)
	token := opts.PageToken
	if len(token) == 0 {
		token = blob.FirstPageToken
	}
	size := opts.PageSize
	if size <= 0 {
		size = defaultPageSize
	}
	objs, next, err := c.base.ListPage(ctx, token, size, &blob.ListOptions{
		Prefix:     c.prefix + enc,
		Delimiter:  encodeDelimiter(opts.Delimiter),
		BeforeList: opts.BeforeList,
	})
	if err != nil {
		return nil, err
	}
	page := &driver.ListPage{NextPageToken: next, Objects: make([]*driver.ListObject, 0, len(objs))}
	for _, o := range objs {
		k := decodeKey(strings.TrimPrefix(o.Key, c.prefix))
		if !exact && !strings.HasPrefix(k, opts.Prefix) {
			continue
		}
		page.Objects = append(page.Objects, &driver.ListObject{
			Key: k, ModTime: o.ModTime, Size: o.Size, MD5: o.MD5, IsDir: o.IsDir, AsFunc: o.As,
		})
	}
	return page, nil
}

func (c *confined) NewRangeReader(ctx context.Context, key string, offset, length int64, opts *driver.ReaderOptions) (driver.Reader, error) {
	r, err := c.base.NewRangeReader(ctx, c.key(key), offset, length, &blob.ReaderOptions{
		BeforeRead: opts.BeforeRead, BufferSize: opts.BufferSize, MaxConcurrency: opts.MaxConcurrency,
	})
	if err != nil {
		return nil, err
	}
	return confinedReader{r}, nil
}

type confinedReader struct{ *blob.Reader }

func (r confinedReader) Attributes() *driver.ReaderAttributes {
	return &driver.ReaderAttributes{ContentType: r.ContentType(), ModTime: r.ModTime(), Size: r.Size()}
}

func (c *confined) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	if key == "" {
		// It would name the prefix itself: a directory, on fileblob.
		return nil, errs.Invalid("key", "must not be empty")
	}
	return c.base.NewWriter(ctx, c.key(key), &blob.WriterOptions{
		BufferSize:                  opts.BufferSize,
		MaxConcurrency:              opts.MaxConcurrency,
		CacheControl:                opts.CacheControl,
		ContentDisposition:          opts.ContentDisposition,
		ContentEncoding:             opts.ContentEncoding,
		ContentLanguage:             opts.ContentLanguage,
		ContentType:                 contentType,
		DisableContentTypeDetection: opts.DisableContentTypeDetection,
		ContentMD5:                  opts.ContentMD5,
		Metadata:                    opts.Metadata,
		BeforeWrite:                 opts.BeforeWrite,
		IfNotExist:                  opts.IfNotExist,
	})
}

func (c *confined) Copy(ctx context.Context, dstKey, srcKey string, opts *driver.CopyOptions) error {
	return c.base.Copy(ctx, c.key(dstKey), c.key(srcKey), &blob.CopyOptions{BeforeCopy: opts.BeforeCopy})
}

func (c *confined) Delete(ctx context.Context, key string, opts *driver.DeleteOptions) error {
	var o blob.DeleteOptions
	if opts != nil {
		o.BeforeDelete = opts.BeforeDelete
	}
	return c.base.DeleteWithOptions(ctx, c.key(key), &o)
}

func (c *confined) SignedURL(ctx context.Context, key string, opts *driver.SignedURLOptions) (string, error) {
	return c.base.SignedURL(ctx, c.key(key), &blob.SignedURLOptions{
		Expiry:                   opts.Expiry,
		Method:                   opts.Method,
		ContentType:              opts.ContentType,
		EnforceAbsentContentType: opts.EnforceAbsentContentType,
		BeforeSign:               opts.BeforeSign,
	})
}

func (c *confined) Close() error {
	if c.owns {
		return c.base.Close()
	}
	return nil
}
