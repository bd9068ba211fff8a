package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
)

// Redis keys of authentication, relative to the store's prefix ("gateway:").
const (
	// KeyAPIKeyPrefix + key id is a string: the key's KeyRecord (JSON).
	KeyAPIKeyPrefix = "auth:key:"
	// KeyOwnerKeysPrefix + owner ("users/alice") is a set of the owner's key ids.
	KeyOwnerKeysPrefix = "auth:ownerkeys:"
	// KeyMembersPrefix + parent ("projects/p" or "global") is a hash:
	// user → role ("viewer", "user", "admin"; "cluster-admin" under global).
	KeyMembersPrefix = "auth:members:"
	// KeyUserRolesPrefix + user is a hash: parent → role, the same
	// memberships indexed by user, so that authentication reads one key.
	KeyUserRolesPrefix = "auth:userroles:"
	// KeyUsedPrefix + token id is a string with a TTL: a one-time token
	// (bootstrap) that was used.
	KeyUsedPrefix = "auth:used:"
	// KeyRefreshPrefix + token id is a string with a TTL: a refresh token
	// issued and not used yet (its subject).
	KeyRefreshPrefix = "auth:refresh:"
	// KeyOIDCBindings is a hash: user → the OIDCBinding (JSON) of the one
	// identity of the OIDC issuer that may sign in as them.
	KeyOIDCBindings = "auth:oidc"
	// KeyRefreshNotBefore is a hash: user → Unix seconds before which
	// the user's refresh tokens were issued in a session since ended (an
	// OIDC binding released): they get nothing more.
	KeyRefreshNotBefore = "auth:refresh-notbefore"
	// KeyNodeRegPrefix + cluster + "|" + node is a string with a TTL: the
	// node's current registration (the id of the bootstrap token its
	// agent registered with), which its identities carry (Claims.Reg).
	KeyNodeRegPrefix = "auth:nodereg:"
)

// GlobalParent is the parent of cluster-admin memberships.
const GlobalParent = "global"

// RoleClusterAdmin is the role of a member of GlobalParent.
const RoleClusterAdmin = "cluster-admin"

// KeyRecord is a stored API key: everything but its secret, of which only a
// hash (auth.HashSecret) is kept.
type KeyRecord struct {
	ID string `json:"id"`
	// Owner is the principal the key authenticates: "users/{user}" or
	// "services/{service}".
	Owner       string    `json:"owner"`
	DisplayName string    `json:"display_name,omitempty"`
	Hash        string    `json:"hash"`
	Creator     string    `json:"creator,omitempty"`
	CreateTime  time.Time `json:"create_time"`
	// ExpireTime and RevokeTime are zero when unset.
	ExpireTime time.Time `json:"expire_time,omitzero"`
	RevokeTime time.Time `json:"revoke_time,omitzero"`
}

// Usable reports whether the key may authenticate at now: not revoked and
// not expired.
func (k *KeyRecord) Usable(now time.Time) bool {
	return k.RevokeTime.IsZero() && (k.ExpireTime.IsZero() || now.Before(k.ExpireTime))
}

// Ended is when the key stopped being usable: the earlier of its
// revocation and its expiry (zero while neither has happened). Revoking
// a key that had expired does not end it again.
func (k *KeyRecord) Ended(now time.Time) time.Time {
	end := k.RevokeTime
	if !k.ExpireTime.IsZero() && !now.Before(k.ExpireTime) && (end.IsZero() || k.ExpireTime.Before(end)) {
		end = k.ExpireTime
	}
	return end
}

// AuthStore keeps API keys, project members, used one-time token ids and
// live refresh tokens in the gateway's Redis. Every instance of the gateway
// shares it; what an instance caches is authn's business.
type AuthStore struct {
	st *store.Store
}

// NewAuthStore returns an AuthStore over st.
func NewAuthStore(st *store.Store) *AuthStore { return &AuthStore{st: st} }

// unavailable is a read or write of what that Redis did not serve, as
// errs.Unavailable with err kept in the chain (%w), so that a consumer
// knows a network failure (bus.Unavailable) and waits for Redis rather
// than dead-lettering the record it was handling.
func unavailable(what string, err error) error {
	return fmt.Errorf("%s: %w: %w", what, errs.Unavailable, err)
}

// KeyNotFound is the answer for an API key id that is not there: the
// store's for an id no key has, and the gateway's for another owner's key
// named under the caller (marked errs.Hide there), in the same words, so
// that the two cannot be told apart.
func KeyNotFound(id string) error { return fmt.Errorf("API key %s: %w", id, errs.NotFound) }

// APIKey returns the key with id; errs.NotFound when there is none.
func (s *AuthStore) APIKey(ctx context.Context, id string) (*KeyRecord, error) {
	k, _, err := s.APIKeyAsStored(ctx, id)
	return k, err
}

// APIKeyAsStored is APIKey with the record's bytes as stored, for a
// write conditioned on them (ReplaceAPIKey).
func (s *AuthStore) APIKeyAsStored(ctx context.Context, id string) (*KeyRecord, []byte, error) {
	raw, err := s.st.Client().Get(ctx, s.st.Key(KeyAPIKeyPrefix+id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil, KeyNotFound(id)
	}
	if err != nil {
		return nil, nil, unavailable("read API key", err)
	}
	var k KeyRecord
	if err := json.Unmarshal(raw, &k); err != nil {
		return nil, nil, fmt.Errorf("API key %s: stored record: %v", id, err)
	}
	return &k, raw, nil
}

// replaceKey sets KEYS[1] (a key record) to ARGV[2] only while it holds
// ARGV[1]: 1, else 0 and nothing written.
var replaceKey = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
`)

// ReplaceAPIKey stores k (a revocation) in one step with the check that
// its record is still was (the bytes APIKeyAsStored returned): false, with
// nothing written, when it changed or was removed since (the retention
// sweep, DeleteAPIKey), so that a removed key never comes back.
func (s *AuthStore) ReplaceAPIKey(ctx context.Context, k *KeyRecord, was []byte) (bool, error) {
	raw, err := json.Marshal(k)
	if err != nil {
		return false, err
	}
	n, err := replaceKey.Run(ctx, s.st.Client(), []string{s.st.Key(KeyAPIKeyPrefix + k.ID)}, was, raw).Int64()
	if err != nil {
		return false, unavailable("store API key", err)
	}
	return n == 1, nil
}

// PutAPIKey stores k and indexes it under its owner, whatever is stored
// (tests; a new key is PutNewAPIKey's, a revocation ReplaceAPIKey's).
func (s *AuthStore) PutAPIKey(ctx context.Context, k *KeyRecord) error {
	raw, err := json.Marshal(k)
	if err != nil {
		return err
	}
	_, err = s.st.Client().TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.st.Key(KeyAPIKeyPrefix+k.ID), raw, 0)
		p.SAdd(ctx, s.st.Key(KeyOwnerKeysPrefix+k.Owner), k.ID)
		return nil
	})
	if err != nil {
		return unavailable("store API key", err)
	}
	return nil
}

// putNewKey stores a new key record (ARGV[1], id ARGV[2]) and indexes it
// under its owner (KEYS[2]) unless the owner already holds ARGV[3] keys:
// then it returns -(held + 1) and stores nothing. One script, so that
// concurrent creates cannot pass the limit together. Only ids whose record
// (ARGV[4] .. id) exists are counted, and the others leave the set: a
// record gone without its index entry (a delete cut short) would count
// for ever, listed nowhere, and keep its owner at the limit with nothing
// to revoke.
var putNewKey = redis.NewScript(`
local n = 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if redis.call('EXISTS', ARGV[4] .. id) == 1 then
    n = n + 1
  else
    redis.call('SREM', KEYS[2], id)
  end
end
if n >= tonumber(ARGV[3]) then return -(n + 1) end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
return 1
`)

// PutNewAPIKey stores the new key k as PutAPIKey does, refusing it
// (ResourceExhausted, naming the count and the limit) when its owner
// already holds max key records, ended ones still kept included.
func (s *AuthStore) PutNewAPIKey(ctx context.Context, k *KeyRecord, max int) error {
	raw, err := json.Marshal(k)
	if err != nil {
		return err
	}
	keys := []string{s.st.Key(KeyAPIKeyPrefix + k.ID), s.st.Key(KeyOwnerKeysPrefix + k.Owner)}
	n, err := putNewKey.Run(ctx, s.st.Client(), keys, raw, k.ID, max, s.st.Key(KeyAPIKeyPrefix)).Int64()
	if err != nil {
		return unavailable("store API key", err)
	}
	if n < 0 {
		return fmt.Errorf("%w: %s holds %d API keys, the limit is %d; revoke some with `loom auth keys revoke`", errs.ResourceExhausted, k.Owner, -n-1, max)
	}
	return nil
}

// SetNodeRegistration records reg as node's (of cluster) current
// registration for ttl; a record kept past its identities' lifetime
// (renewals extend it) is all that is needed.
func (s *AuthStore) SetNodeRegistration(ctx context.Context, cluster, node, reg string, ttl time.Duration) error {
	if err := s.st.Client().Set(ctx, s.st.Key(KeyNodeRegPrefix+cluster+"|"+node), reg, ttl).Err(); err != nil {
		return unavailable("store node registration", err)
	}
	return nil
}

// renewNodeReg keeps KEYS[1] (a node's registration) as ARGV[1] for
// ARGV[2] ms, only while it is ARGV[1] or none is kept: 1, else 0 and
// nothing written.
var renewNodeReg = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// RenewNodeRegistration keeps reg as node's (of cluster) registration for
// ttl, in one step with the check that it still is (or that none is kept):
// false, with nothing written, when the node registered again since. A
// read followed by SetNodeRegistration would let a renewal of the old
// image's identity, checked just before the new agent registered, write
// the old registration back over the new one: the new agent locked out,
// the old image the node's again.
func (s *AuthStore) RenewNodeRegistration(ctx context.Context, cluster, node, reg string, ttl time.Duration) (bool, error) {
	n, err := renewNodeReg.Run(ctx, s.st.Client(), []string{s.st.Key(KeyNodeRegPrefix + cluster + "|" + node)}, reg, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, unavailable("renew node registration", err)
	}
	return n == 1, nil
}

// NodeRegistration returns node's (of cluster) current registration, ""
// when none is recorded.
func (s *AuthStore) NodeRegistration(ctx context.Context, cluster, node string) (string, error) {
	reg, err := s.st.Client().Get(ctx, s.st.Key(KeyNodeRegPrefix+cluster+"|"+node)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", unavailable("read node registration", err)
	}
	return reg, nil
}

// DeleteAPIKey removes the key record id of owner.
func (s *AuthStore) DeleteAPIKey(ctx context.Context, owner, id string) error {
	_, err := s.st.Client().TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.st.Key(KeyAPIKeyPrefix+id))
		p.SRem(ctx, s.st.Key(KeyOwnerKeysPrefix+owner), id)
		return nil
	})
	if err != nil {
		return unavailable("delete API key", err)
	}
	return nil
}

// APIKeys returns the keys of owner, by id.
func (s *AuthStore) APIKeys(ctx context.Context, owner string) ([]*KeyRecord, error) {
	rdb := s.st.Client()
	ids, err := rdb.SMembers(ctx, s.st.Key(KeyOwnerKeysPrefix+owner)).Result()
	if err != nil {
		return nil, unavailable("list API keys", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	sort.Strings(ids)
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.st.Key(KeyAPIKeyPrefix + id)
	}
	vals, err := rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, unavailable("list API keys", err)
	}
	out := make([]*KeyRecord, 0, len(vals))
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue // removed meanwhile
		}
		var k KeyRecord
		if err := json.Unmarshal([]byte(str), &k); err != nil {
			return nil, fmt.Errorf("API key %s: stored record: %v", ids[i], err)
		}
		out = append(out, &k)
	}
	return out, nil
}

// Roles returns user's memberships: the role per project ("projects/p" →
// role) and whether the user is a cluster administrator.
func (s *AuthStore) Roles(ctx context.Context, user string) (map[string]auth.Role, bool, error) {
	m, err := s.st.Client().HGetAll(ctx, s.st.Key(KeyUserRolesPrefix+user)).Result()
	if err != nil {
		return nil, false, unavailable("read roles", err)
	}
	roles := make(map[string]auth.Role, len(m))
	admin := false
	for parent, r := range m {
		if parent == GlobalParent {
			admin = r == RoleClusterAdmin
			continue
		}
		role, err := auth.ParseRole(r)
		if err != nil || role == auth.RoleNone {
			continue
		}
		// auth.Principal.Roles is keyed by project id, as authorization
		// reads it from resource names.
		roles[strings.TrimPrefix(parent, "projects/")] = role
	}
	return roles, admin, nil
}

// SetMember gives user role under parent ("projects/p" with viewer, user or
// admin; GlobalParent with RoleClusterAdmin); role "" removes the membership.
func (s *AuthStore) SetMember(ctx context.Context, parent, user, role string) error {
	return s.SetMemberAtMost(ctx, parent, user, role, 0)
}

// setMember sets (or with role "" removes) a membership on both indexes;
// a new member is refused, returning -(members + 1), when parent already
// has ARGV[3] members (> 0). With ARGV[5] (a user: the caller) set, it
// first checks that ARGV[5] still may manage parent's members, by their
// memberships (KEYS[3]) as they are now: a cluster administrator (field
// ARGV[6] is ARGV[7]), or an admin (ARGV[8]) of parent when parent is not
// ARGV[6]; else it returns 0 and writes nothing. It then refuses, returning
// 2 and writing nothing, to take the role that administers parent (admin;
// cluster-admin under ARGV[6]) from its last holder: parent would be left
// with no one to administer it. Only a cluster administrator's call (or
// one with no ARGV[5]) may remove a project's last admin who is its only
// member: the project is left empty, not without an admin over members.
// One script, so that concurrent calls cannot pass the cap together, nor
// two admins demote (or remove) each other, or each themselves, each
// checked as the other's write lands, and a member already there may
// always change role (but the last admin).
var setMember = redis.NewScript(`
local caller_ca = ARGV[5] == '' or redis.call('HGET', KEYS[3], ARGV[6]) == ARGV[7]
if not caller_ca then
  if ARGV[4] == ARGV[6] or redis.call('HGET', KEYS[3], ARGV[4]) ~= ARGV[8] then return 0 end
end
local admin = ARGV[8]
if ARGV[4] == ARGV[6] then admin = ARGV[7] end
if ARGV[2] ~= admin and redis.call('HGET', KEYS[1], ARGV[1]) == admin then
  local n = 0
  for _, r in ipairs(redis.call('HVALS', KEYS[1])) do
    if r == admin then n = n + 1 end
  end
  if n <= 1 and not (caller_ca and ARGV[4] ~= ARGV[6] and ARGV[2] == '' and redis.call('HLEN', KEYS[1]) == 1) then
    return 2
  end
end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[4])
  return 1
end
local max = tonumber(ARGV[3])
if max > 0 and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  local n = redis.call('HLEN', KEYS[1])
  if n >= max then return -(n + 1) end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[4], ARGV[2])
return 1
`)

// SetMemberAtMost is SetMember refusing a new member (ResourceExhausted,
// naming the count and the limit) when parent already has max members
// (max 0: no limit); a member already there may change role or leave.
func (s *AuthStore) SetMemberAtMost(ctx context.Context, parent, user, role string, max int) error {
	return s.SetMemberBy(ctx, "", parent, user, role, max)
}

// SetMemberBy is SetMemberAtMost on behalf of the user by, checked in the
// same step as the write: PermissionDenied, with nothing written, unless
// by's memberships, as stored when it is written, make them a cluster
// administrator or (parent not GlobalParent) an admin of parent. What the
// caller's principal said when the call began is a read: two admins
// removing each other, each allowed by it, would leave neither. by ""
// checks nothing (the gateway's bootstrap; authentication off).
//
// Whoever calls, the write never takes the role that administers parent
// (admin; cluster-admin under GlobalParent) from its last holder:
// FailedPrecondition naming parent and the user, saying to make another
// member admin first; the count is made in the same step, so that two
// admins removing themselves at once leave one. A cluster administrator
// (or by "") may still remove a project's last admin who is its last
// member, emptying it.
func (s *AuthStore) SetMemberBy(ctx context.Context, by, parent, user, role string, max int) error {
	keys := []string{s.st.Key(KeyMembersPrefix + parent), s.st.Key(KeyUserRolesPrefix + user), s.st.Key(KeyUserRolesPrefix + by)}
	n, err := setMember.Run(ctx, s.st.Client(), keys, user, role, max, parent, by, GlobalParent, RoleClusterAdmin, auth.RoleAdmin.String()).Int64()
	if err != nil {
		return unavailable("store member", err)
	}
	switch {
	case n == 0 && parent == GlobalParent:
		return fmt.Errorf("%w: %s is no longer a cluster administrator, whom alone the global (cluster-admin) members are managed by", errs.PermissionDenied, auth.UserName(by))
	case n == 0:
		return fmt.Errorf("%w: %s is no longer an admin of %s (nor a cluster administrator), whom alone its members are managed by", errs.PermissionDenied, auth.UserName(by), parent)
	case n < 0:
		return fmt.Errorf("%w: %s has %d members, the limit is %d; remove one first", errs.ResourceExhausted, parent, -n-1, max)
	case n == 2:
		return lastAdminError(parent, user, role)
	}
	return nil
}

// lastAdminError is SetMemberBy's refusal to take the role that
// administers parent from user, its last holder (role: what they would
// have had instead, "" for none).
func lastAdminError(parent, user, role string) error {
	change := "removing them"
	if role != "" {
		change = "making them " + role
	}
	if parent == GlobalParent {
		return fmt.Errorf("%w: %s is the last cluster administrator: %s would leave no one to administer the cluster; "+
			"make another user cluster-admin first (`loom auth members set USER %s --global`)", errs.FailedPrecondition, auth.UserName(user), change, RoleClusterAdmin)
	}
	return fmt.Errorf("%w: %s is the last admin of %s: %s would leave no one to administer the project; "+
		"make another member admin first (`loom auth members set USER admin --project %s`)",
		errs.FailedPrecondition, auth.UserName(user), parent, change, strings.TrimPrefix(parent, "projects/"))
}

// Members returns parent's members: user → role.
func (s *AuthStore) Members(ctx context.Context, parent string) (map[string]string, error) {
	m, err := s.st.Client().HGetAll(ctx, s.st.Key(KeyMembersPrefix+parent)).Result()
	if err != nil {
		return nil, unavailable("list members", err)
	}
	return m, nil
}

// UseOnce records the one-time token id jti as used until expires and
// reports whether this call was the first to use it (SET NX: one winner
// across gateway instances).
func (s *AuthStore) UseOnce(ctx context.Context, jti string, expires time.Time, now time.Time) (bool, error) {
	ttl := max(expires.Sub(now), 0) + time.Minute // past the token's own life, so it can never be replayed
	ok, err := s.st.Client().SetNX(ctx, s.st.Key(KeyUsedPrefix+jti), "1", ttl).Result()
	if err != nil {
		return false, unavailable("record token use", err)
	}
	return ok, nil
}

// PutRefresh records the refresh token id jti, for subject, as live until expires.
func (s *AuthStore) PutRefresh(ctx context.Context, jti, subject string, expires, now time.Time) error {
	ttl := max(expires.Sub(now), time.Second)
	if err := s.st.Client().Set(ctx, s.st.Key(KeyRefreshPrefix+jti), subject, ttl).Err(); err != nil {
		return unavailable("store refresh token", err)
	}
	return nil
}

// TakeRefresh uses up the refresh token id jti: it returns the subject it
// was issued to, or "" when it is unknown or was used already (GETDEL: one
// winner across gateway instances).
func (s *AuthStore) TakeRefresh(ctx context.Context, jti string) (string, error) {
	subject, err := s.st.Client().GetDel(ctx, s.st.Key(KeyRefreshPrefix+jti)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", unavailable("use refresh token", err)
	}
	return subject, nil
}

// OIDCBinding is the identity of the OIDC issuer (issuer and subject)
// bound to a user: the only one that may sign in as them.
type OIDCBinding struct {
	Issuer     string    `json:"iss"`
	Subject    string    `json:"sub"`
	CreateTime time.Time `json:"create_time"`
	// Linked: made (or confirmed) by a caller authenticated as the user
	// with an API key, not by a sign-in alone; what root and cluster
	// administrators need.
	Linked bool `json:"linked,omitempty"`
}

// OIDCBindingOf returns user's binding, or nil when none is stored.
func (s *AuthStore) OIDCBindingOf(ctx context.Context, user string) (*OIDCBinding, error) {
	raw, err := s.st.Client().HGet(ctx, s.st.Key(KeyOIDCBindings), user).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable("read OIDC binding", err)
	}
	return decodeBinding(user, raw)
}

func decodeBinding(user string, raw []byte) (*OIDCBinding, error) {
	var b OIDCBinding
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("OIDC binding of %s: %w", user, err)
	}
	return &b, nil
}

// BindOIDC binds user to b unless a binding is stored already (HSETNX:
// one winner across gateway instances), and returns the binding that
// holds: b, or the one stored before.
func (s *AuthStore) BindOIDC(ctx context.Context, user string, b OIDCBinding) (*OIDCBinding, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	for range 3 {
		set, err := s.st.Client().HSetNX(ctx, s.st.Key(KeyOIDCBindings), user, raw).Result()
		if err != nil {
			return nil, unavailable("store OIDC binding", err)
		}
		if set {
			return &b, nil
		}
		held, err := s.OIDCBindingOf(ctx, user)
		if err != nil || held != nil {
			return held, err
		}
		// Released in between: try again.
	}
	return nil, fmt.Errorf("store OIDC binding of %s: %w: it was made and released again meanwhile; sign in again", user, errs.Unavailable)
}

// PutOIDC stores user's binding b, replacing the one there (marking it
// linked).
func (s *AuthStore) PutOIDC(ctx context.Context, user string, b OIDCBinding) error {
	raw, err := json.Marshal(b)
	if err != nil {
		return err
	}
	if err := s.st.Client().HSet(ctx, s.st.Key(KeyOIDCBindings), user, raw).Err(); err != nil {
		return unavailable("store OIDC binding", err)
	}
	return nil
}

// releaseScript deletes a binding (KEYS[1] field ARGV[1]) and, when there
// was one, sets the user's refresh cut-off (KEYS[2]) to ARGV[2]; it
// returns the binding deleted, or nil. One script: nothing made between a
// read and a delete is lost, and a release of nothing changes nothing.
var releaseScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
end
return v`)

// ReleaseOIDC deletes user's binding and returns what it was (nil when
// there was none, and then changes nothing), ending the user's sessions so
// far: refresh tokens issued before now get nothing more
// (RefreshNotBefore).
func (s *AuthStore) ReleaseOIDC(ctx context.Context, user string, now time.Time) (*OIDCBinding, error) {
	raw, err := releaseScript.Run(ctx, s.st.Client(), []string{s.st.Key(KeyOIDCBindings), s.st.Key(KeyRefreshNotBefore)}, user, now.Unix()).Text()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable("delete OIDC binding", err)
	}
	return decodeBinding(user, []byte(raw))
}

// RefreshNotBefore is the time before which user's refresh tokens were
// issued in an ended session (zero: none ended).
func (s *AuthStore) RefreshNotBefore(ctx context.Context, user string) (time.Time, error) {
	sec, err := s.st.Client().HGet(ctx, s.st.Key(KeyRefreshNotBefore), user).Int64()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, unavailable("read refresh cut-off", err)
	}
	return time.Unix(sec, 0), nil
}

// NodeRevocation returns the revocation of node's identities (by its full
// name) that the provisioner wrote when it removed the node
// (auth.RevokedNodesKey, outside the gateway's prefix: the gateway's Redis
// user needs read access to it), ok false when there is none or it does not
// decode.
func (s *AuthStore) NodeRevocation(ctx context.Context, node string) (rev auth.NodeRevocation, ok bool, err error) {
	b, err := s.st.Client().HGet(ctx, auth.RevokedNodesKey, node).Bytes()
	if errors.Is(err, redis.Nil) {
		return rev, false, nil
	}
	if err != nil {
		return rev, false, unavailable("read node revocation", err)
	}
	rev, err = auth.DecodeNodeRevocation(b)
	if err != nil {
		return rev, false, nil
	}
	return rev, true, nil
}
