package azfake

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
)

// clockSkew is how far a SAS's start time may be in the future, as the
// service allows for clocks that disagree.
const clockSkew = 5 * time.Minute

// authorize checks that r carries the account's shared-key signature or a
// valid blob SAS that allows r's method. The answers are the service's:
// 403 AuthenticationFailed for a wrong signature or an expired SAS, 403
// AuthorizationPermissionMismatch for a SAS that does not allow the
// operation, 401 NoAuthenticationInformation for neither.
func (s *Server) authorize(r *http.Request, q url.Values, containerName, blobName string, hasBlob bool) *apiError {
	if q.Has("sig") {
		return s.authorizeSAS(r, containerName, blobName, hasBlob)
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return errorf(http.StatusUnauthorized, "NoAuthenticationInformation", "server failed to authenticate the request: no Authorization header and no SAS")
	}
	scheme, cred, _ := strings.Cut(auth, " ")
	account, sig, _ := strings.Cut(cred, ":")
	if scheme != "SharedKey" || account != Account {
		return errorf(http.StatusForbidden, "AuthenticationFailed", "only SharedKey authorization for %s is supported by the fake (got %q)", Account, scheme+" "+account)
	}
	if r.Header.Get("x-ms-date") == "" && r.Header.Get("Date") == "" {
		return errorf(http.StatusForbidden, "AuthenticationFailed", "the request has no x-ms-date")
	}
	toSign := stringToSign(r)
	if subtle.ConstantTimeCompare([]byte(hmacSHA256(toSign)), []byte(sig)) != 1 {
		return errorf(http.StatusForbidden, "AuthenticationFailed", "the MAC signature found in the HTTP request is not the same as any computed signature; the server used the following string to sign: %q", toSign)
	}
	return nil
}

// hmacSHA256 is the base64 HMAC-SHA256 of message with the account key.
func hmacSHA256(message string) string {
	key, err := base64.StdEncoding.DecodeString(Key)
	if err != nil {
		panic(err) // a constant
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(message))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// stringToSign is the shared-key string to sign for r
// (https://learn.microsoft.com/rest/api/storageservices/authorize-with-shared-key).
func stringToSign(r *http.Request) string {
	h := r.Header
	contentLength := h.Get("Content-Length")
	if contentLength == "" && r.ContentLength > 0 {
		contentLength = strconv.FormatInt(r.ContentLength, 10)
	}
	if contentLength == "0" {
		contentLength = ""
	}
	return strings.Join([]string{
		r.Method,
		h.Get("Content-Encoding"),
		h.Get("Content-Language"),
		contentLength,
		h.Get("Content-MD5"),
		h.Get("Content-Type"),
		"", // Date: x-ms-date is signed among the x-ms- headers instead
		h.Get("If-Modified-Since"),
		h.Get("If-Match"),
		h.Get("If-None-Match"),
		h.Get("If-Unmodified-Since"),
		h.Get("Range"),
		canonicalizedHeaders(h),
		canonicalizedResource(r.URL),
	}, "\n")
}

// canonicalizedHeaders joins the x-ms- headers, lower-cased, in the
// service's order: a culture-aware comparison in which '-' counts only
// when the names are otherwise equal, and '_' sorts before the digits.
// That is all it takes for header names, which are made of lower-case
// letters, digits, '-' and '_'.
func canonicalizedHeaders(h http.Header) string {
	values := map[string][]string{}
	for k, v := range h {
		name := strings.ToLower(strings.TrimSpace(k))
		if strings.HasPrefix(name, "x-ms-") {
			values[name] = append(values[name], v...)
		}
	}
	names := make([]string, 0, len(values))
	for n := range values {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := headerSortKey(names[i]), headerSortKey(names[j])
		if a != b {
			return a < b
		}
		return names[i] < names[j]
	})
	lines := make([]string, len(names))
	for i, n := range names {
		lines[i] = n + ":" + strings.Join(values[n], ",")
	}
	return strings.Join(lines, "\n")
}

func headerSortKey(name string) string {
	var b strings.Builder
	for _, c := range []byte(name) {
		switch {
		case c == '-':
		case c == '_':
			b.WriteByte('0' - 1)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// canonicalizedResource is /ACCOUNT + the escaped path + each query
// parameter, lower-cased and sorted, as "\nname:v1,v2".
func canonicalizedResource(u *url.URL) string {
	var b strings.Builder
	b.WriteString("/" + Account)
	if p := u.EscapedPath(); p != "" {
		b.WriteString(p)
	} else {
		b.WriteString("/")
	}
	params := u.Query()
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		vs := append([]string(nil), params[n]...)
		sort.Strings(vs)
		b.WriteString("\n" + strings.ToLower(n) + ":" + strings.Join(vs, ","))
	}
	return b.String()
}

// authorizeSAS checks a blob service SAS: its signature over the fields
// it carries, recomputed with the account key; its time window; and that
// its permissions allow r's method on this blob.
func (s *Server) authorizeSAS(r *http.Request, containerName, blobName string, hasBlob bool) *apiError {
	parts, err := sas.ParseURL("http://" + r.Host + r.URL.RequestURI())
	if err != nil {
		return errorf(http.StatusForbidden, "AuthenticationFailed", "the SAS cannot be parsed: %v", err)
	}
	p := parts.SAS
	if !hasBlob || p.Resource() != "b" || p.SignedVersion() != "" {
		return errorf(http.StatusForbidden, "AuthenticationFailed", "only a blob service SAS (sr=b, signed with the account key) is supported by the fake")
	}
	want, err := sas.BlobSignatureValues{
		Version:              p.Version(),
		Protocol:             p.Protocol(),
		StartTime:            p.StartTime(),
		ExpiryTime:           p.ExpiryTime(),
		SnapshotTime:         p.SnapshotTime(),
		Permissions:          p.Permissions(),
		IPRange:              p.IPRange(),
		Identifier:           p.Identifier(),
		ContainerName:        containerName,
		BlobName:             blobName,
		CacheControl:         p.CacheControl(),
		ContentDisposition:   p.ContentDisposition(),
		ContentEncoding:      p.ContentEncoding(),
		ContentLanguage:      p.ContentLanguage(),
		ContentType:          p.ContentType(),
		EncryptionScope:      p.EncryptionScope(),
		AuthorizedObjectID:   p.AuthorizedObjectID(),
		UnauthorizedObjectID: p.UnauthorizedObjectID(),
		CorrelationID:        p.SignedCorrelationID(),
	}.SignWithSharedKey(s.cred)
	if err != nil || subtle.ConstantTimeCompare([]byte(want.Signature()), []byte(p.Signature())) != 1 {
		return errorf(http.StatusForbidden, "AuthenticationFailed", "signature did not match")
	}
	now := time.Now()
	if p.ExpiryTime().IsZero() || now.After(p.ExpiryTime()) {
		return errorf(http.StatusForbidden, "AuthenticationFailed", "signed expiry time %s has passed", p.ExpiryTime().Format(time.RFC3339))
	}
	if st := p.StartTime(); !st.IsZero() && now.Add(clockSkew).Before(st) {
		return errorf(http.StatusForbidden, "AuthenticationFailed", "signed start time %s is in the future", st.Format(time.RFC3339))
	}
	var need string
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		need = "r"
	case http.MethodPut:
		need = "cw" // either: c creates a new blob, w writes any
	case http.MethodDelete:
		need = "d"
	}
	if need == "" || !strings.ContainsAny(p.Permissions(), need) {
		return errorf(http.StatusForbidden, "AuthorizationPermissionMismatch", "this request is not authorized to perform this operation using this permission (sp=%s)", p.Permissions())
	}
	return nil
}
