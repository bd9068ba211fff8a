package domain

import (
	"fmt"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/trainingspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Lookup is the list filter's view of a served model (View): display_name,
// description, version_id, version_description, artifact_uri, labels.KEY, create_time, update_time, version_create_time and
// version_update_time (RFC 3339). Filters are libs/trainingspec's AIP-160
// grammar, the one every Vertex list in Loom takes.
func Lookup(m *loomv1.Model) func(key string) (string, bool) {
	return func(key string) (string, bool) {
		switch key {
		case "display_name":
			return m.GetDisplayName(), true
		case "description":
			return m.GetDescription(), true
		case "version_id", "versionId":
			return m.GetVersionId(), true
		case "version_description", "versionDescription":
			return m.GetVersionDescription(), true
		case "artifact_uri", "artifactUri":
			return m.GetArtifactUri(), true
		case "create_time":
			return rfc3339(m.GetCreateTime().AsTime()), m.GetCreateTime() != nil
		case "update_time":
			return rfc3339(m.GetUpdateTime().AsTime()), m.GetUpdateTime() != nil
		case "version_create_time", "versionCreateTime":
			return rfc3339(m.GetVersionCreateTime().AsTime()), m.GetVersionCreateTime() != nil
		case "version_update_time", "versionUpdateTime":
			return rfc3339(m.GetVersionUpdateTime().AsTime()), m.GetVersionUpdateTime() != nil
		}
		if k, ok := strings.CutPrefix(key, "labels."); ok {
			v, ok := m.GetLabels()[k]
			return v, ok
		}
		return "", false
	}
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// FilterKeys are the keys Lookup answers, as a filter may name them: a
// filter on any other key would match nothing and read as "no such
// models", so it is refused instead (as the training lists refuse theirs).
var FilterKeys = trainingspec.FilterKeys{
	{Name: "display_name", Kind: trainingspec.FilterText},
	{Name: "description", Kind: trainingspec.FilterText},
	{Name: "version_id", Kind: trainingspec.FilterText, Aliases: []string{"versionId"}},
	{Name: "version_description", Kind: trainingspec.FilterText, Aliases: []string{"versionDescription"}},
	{Name: "artifact_uri", Kind: trainingspec.FilterText, Aliases: []string{"artifactUri"}},
	{Name: "labels", Kind: trainingspec.FilterMap},
	{Name: "create_time", Kind: trainingspec.FilterTime},
	{Name: "update_time", Kind: trainingspec.FilterTime},
	{Name: "version_create_time", Kind: trainingspec.FilterTime, Aliases: []string{"versionCreateTime"}},
	{Name: "version_update_time", Kind: trainingspec.FilterTime, Aliases: []string{"versionUpdateTime"}},
}

// Filter returns the models of ms that pass filter (AIP-160; "" keeps
// all). A filter naming a key outside FilterKeys, or a time that is not
// RFC 3339, is an *errs.InvalidError on "filter".
func Filter(filter string, ms []*loomv1.Model) ([]*loomv1.Model, error) {
	if strings.TrimSpace(filter) == "" {
		return ms, nil
	}
	f, err := trainingspec.ParseFilterFor(filter, FilterKeys)
	if err != nil {
		return nil, err
	}
	var out []*loomv1.Model
	for _, m := range ms {
		if f.Match(Lookup(m)) {
			out = append(out, m)
		}
	}
	return out, nil
}

// MaxOrderBy bounds order_by, in bytes and in fields.
const (
	MaxOrderBy       = 256
	MaxOrderByFields = 5
)

// orderFields are the fields order_by may name (snake_case or camelCase).
var orderFields = map[string]string{
	"display_name": "display_name", "displayName": "display_name",
	"create_time": "create_time", "createTime": "create_time",
	"update_time": "update_time", "updateTime": "update_time",
	"version_id": "version_id", "versionId": "version_id",
	"version_create_time": "version_create_time", "versionCreateTime": "version_create_time",
}

// Order is a parsed order_by: fields, each ascending or descending.
type Order []orderField

type orderField struct {
	name string
	desc bool
}

// ParseOrderBy parses AIP-132's order_by: "FIELD [asc|desc], ..." over
// display_name, create_time, update_time, version_id and
// version_create_time. Bad input is InvalidArgument naming order_by.
func ParseOrderBy(s string) (Order, error) {
	if len(s) > MaxOrderBy {
		return nil, errs.Invalid("order_by", "%d bytes, more than the limit of %d", len(s), MaxOrderBy)
	}
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxOrderByFields {
		return nil, errs.Invalid("order_by", "%d fields, more than the limit of %d", len(parts), MaxOrderByFields)
	}
	var o Order
	for _, p := range parts {
		words := strings.Fields(p)
		if len(words) == 0 || len(words) > 2 {
			return nil, errs.Invalid("order_by", "%q: want FIELD [asc|desc]", Clip(strings.TrimSpace(p)))
		}
		name, ok := orderFields[words[0]]
		if !ok {
			return nil, errs.Invalid("order_by", "cannot order by %q: one of display_name, create_time, update_time, version_id, version_create_time", Clip(words[0]))
		}
		f := orderField{name: name}
		if len(words) == 2 {
			switch strings.ToLower(words[1]) {
			case "desc":
				f.desc = true
			case "asc":
			default:
				return nil, errs.Invalid("order_by", "%q: after the field comes asc or desc", Clip(strings.TrimSpace(p)))
			}
		}
		o = append(o, f)
	}
	return o, nil
}

// Key is the paging key (libs/paging) of a served model under o: each
// field's value encoded so that bytewise order is the requested order
// (descending fields byte-inverted), then the served name, unique. With no
// order the key is the model's name, then its version id, padded so that
// versions sort as numbers.
func (o Order) Key(m *loomv1.Model) string {
	var b strings.Builder
	for _, f := range o {
		var v string
		switch f.name {
		case "display_name":
			v = m.GetDisplayName()
		case "create_time":
			v = timeKey(m.GetCreateTime().AsTime())
		case "update_time":
			v = timeKey(m.GetUpdateTime().AsTime())
		case "version_create_time":
			v = timeKey(m.GetVersionCreateTime().AsTime())
		case "version_id":
			v = padded(m.GetVersionId())
		}
		if f.desc {
			inv := []byte(v)
			for i := range inv {
				inv[i] = 0xff - inv[i]
			}
			b.Write(inv)
			b.WriteByte(0xff)
		} else {
			b.WriteString(v)
			b.WriteByte(0)
		}
	}
	name, ver, _ := strings.Cut(m.GetName(), "@")
	b.WriteString(name)
	b.WriteByte(0)
	b.WriteString(padded(ver))
	return b.String()
}

// timeKey is t's UnixNano with the sign bit flipped: unsigned, it sorts as
// the times do, before 1970 included.
func timeKey(t time.Time) string { return fmt.Sprintf("%020d", uint64(t.UnixNano())^(1<<63)) }

func padded(n string) string {
	var i int
	if _, err := fmt.Sscan(n, &i); err != nil {
		return n
	}
	return paging.IndexKey(i)
}
