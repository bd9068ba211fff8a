package cli

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/cmd/loom/internal/creds"
	"github.com/loom-ml/loom/cmd/loom/internal/slurmcli"
	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// getenv looks k up in the caller's environment (a.environ).
func (a *app) getenv(k string) string { return getenvIn(a.environ(), k) }

// credStore is the credentials file, or nil when there is no config
// directory to keep it in.
func (a *app) credStore() (*creds.Store, error) {
	dir := a.configDir
	if dir == "" {
		var err error
		if dir, err = creds.Dir(a.getenv); err != nil {
			return nil, err
		}
	}
	return creds.Open(dir), nil
}

// credSource is what finds the credential of a.gateway's calls: LOOM_TOKEN,
// then the login daemon of LOOM_AUTHD_SOCKET (set in a `loom clusters
// login` shell), then the credentials file. The caller holds connMu.
func (a *app) credSource() *creds.Source {
	if a.src != nil && a.src.Gateway == a.gateway {
		return a.src
	}
	src := &creds.Source{Gateway: a.gateway, Getenv: a.getenv, Authd: a.getenv("LOOM_AUTHD_SOCKET")}
	if fixed := a.fixedCred; fixed != "" {
		src = &creds.Source{Gateway: a.gateway, Getenv: func(k string) string {
			if k == "LOOM_TOKEN" {
				return fixed
			}
			return ""
		}}
	} else if st, err := a.credStore(); err == nil {
		src.Store = st
	}
	a.src = src
	return src
}

// whoAmI asks the gateway who the caller is.
func (a *app) whoAmI(ctx context.Context) (*loomv1.Principal, error) {
	conn, err := a.client()
	if err != nil {
		return nil, err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	return loomv1.NewAuthServiceClient(conn).WhoAmI(cctx, &loomv1.WhoAmIRequest{})
}

// userName is who the caller is, for what the CLI shows and the owner it
// names: the principal's user (from the login daemon or the credentials
// file, else WhoAmI), else the OS account running loom. Never USER or
// LOOM_USER, which anyone can set; the gateway goes by the credential in
// any case. The one exception is a gateway without authentication at all
// (WhoAmI Unimplemented: it predates issue 13 and believes the user named
// in each request, whoever sends it): there the commands name USER as
// they always did, which gives no one anything that gateway does not
// already give everyone.
func (a *app) userName(ctx context.Context) string {
	if _, err := a.client(); err == nil {
		a.connMu.Lock()
		src := a.src
		a.connMu.Unlock()
		if src != nil {
			if _, err := src.Token(ctx); err == nil {
				if u, _, ok := src.Identity(); ok {
					return u
				}
				p, err := a.whoAmI(ctx)
				switch {
				case err == nil && p.GetUser() != "":
					return p.GetUser()
				case codeOf(err) == codes.Unimplemented:
					if u := cmp.Or(a.getenv("LOOM_USER"), a.getenv("USER")); u != "" {
						return u
					}
				}
			}
		}
	}
	return slurmcli.AccountName()
}

// gatewayFlag is " --gateway ADDR" when a.gateway is not the default, for
// commands the CLI tells the user to run.
func (a *app) gatewayFlag() string {
	if a.gateway == DefaultGateway {
		return ""
	}
	return " --gateway " + a.gateway
}

func (a *app) authCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Log in to a gateway, show who you are, manage API keys and project members",
		Long: `Authentication. Every call the CLI makes carries a credential, found in
this order:

  1. LOOM_TOKEN, when set (an access token or API key);
  2. in a "loom clusters login" shell, the login daemon (LOOM_AUTHD_SOCKET),
     which vouches for your OS account;
  3. the credentials file (` + "`loom auth login`" + ` writes it, per gateway, in
     $LOOM_CONFIG_DIR or your config directory, mode 0600).

"loom up" makes an administrator key at its first start and saves it there
for you, so that the loom commands on that machine just work. Access tokens
last 30 minutes; the CLI gets a new one with the stored key or refresh token
when one expires.`,
	}
	keys := &cobra.Command{Use: "keys", Short: "Create, list and revoke API keys"}
	keys.AddCommand(a.authKeysCreateCommand(), a.authKeysListCommand(), a.authKeysRevokeCommand())
	cmd.AddCommand(a.authLoginCommand(), a.authLogoutCommand(), a.authWhoAmICommand(), keys, a.authMembersCommand(), a.authOIDCBindingCommand())
	return cmd
}

// authOIDCBindingCommand is `loom auth oidc-binding [USER]` and its
// `release USER`.
func (a *app) authOIDCBindingCommand() *cobra.Command {
	show := func(cmd *cobra.Command, b *loomv1.OidcBinding) error {
		out := cmd.OutOrStdout()
		if a.output == "json" {
			return writeJSON(out, b)
		}
		tw := newTable(out)
		row(tw, "USER", "ISSUER", "SUBJECT", "BOUND")
		row(tw, strings.TrimSuffix(strings.TrimPrefix(b.GetName(), "users/"), "/oidcBinding"), b.GetIssuer(), b.GetSubject(), age(b.GetCreateTime(), a.now())+" ago")
		return tw.Flush()
	}
	cmd := &cobra.Command{
		Use:   "oidc-binding [USER]",
		Short: "Show which identity of the OIDC provider may sign in as you (or USER: cluster administrators)",
		Long: `The first OIDC sign-in as an OS account binds the account to the identity
that made it (the ID token's issuer and subject): from then on only that
identity may sign in as the account, whatever user claim another presents.
root and cluster administrators are bound only by linking: log in otherwise
(an API key), then ` + "`loom auth login --oidc-token-file FILE --link`" + `.
A cluster administrator releases a binding (a replaced provider, a changed
subject) with ` + "`loom auth oidc-binding release USER`" + `.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			user := "-"
			if len(args) == 1 {
				user = strings.TrimPrefix(args[0], "users/")
			}
			cl, err := a.authService()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			b, err := cl.GetOidcBinding(ctx, &loomv1.GetOidcBindingRequest{Name: "users/" + user + "/oidcBinding"})
			if err != nil {
				return a.explain("get the OIDC binding of users/"+user, err)
			}
			return show(cmd, b)
		},
	}
	release := &cobra.Command{
		Use:   "release USER",
		Short: "Release USER's OIDC binding: the next OIDC sign-in as them binds again (cluster administrators)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("give the user whose binding to release, e.g. `loom auth oidc-binding release alice`")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.authService()
			if err != nil {
				return err
			}
			name := "users/" + strings.TrimPrefix(args[0], "users/") + "/oidcBinding"
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			b, err := cl.DeleteOidcBinding(ctx, &loomv1.DeleteOidcBindingRequest{Name: name})
			if err != nil {
				return a.explain("release "+name, err)
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), b)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Released %s (subject %s of %s); the next OIDC sign-in as %s binds again.\n", name, b.GetSubject(), b.GetIssuer(), args[0])
			return nil
		},
	}
	cmd.AddCommand(release)
	return cmd
}

func (a *app) authLoginCommand() *cobra.Command {
	var keyFile, oidcFile string
	var link bool
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Log in to the gateway with an API key or an OIDC ID token",
		Long: `Log in to the gateway (--gateway / LOOM_GATEWAY) and save the credential in
the credentials file, for this gateway.

With an API key ("lk_..."): typed at the prompt (not echoed), or read from
--key-file (- for stdin) or from stdin when it is not a terminal. With your
identity provider: --oidc-token-file holds an OIDC ID token, exchanged for
an access and a refresh token. The first OIDC sign-in as an account binds
it to that identity (loom auth oidc-binding); root and cluster
administrators link theirs with --link while logged in otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyFile != "" && oidcFile != "" {
				return usagef("give --key-file or --oidc-token-file, not both")
			}
			if link && oidcFile == "" {
				return usagef("--link links an OIDC identity: give --oidc-token-file too")
			}
			st, err := a.credStore()
			if err != nil {
				return err
			}
			var key, idToken string
			switch {
			case oidcFile != "":
				if idToken, err = readCredential(oidcFile, cmd.InOrStdin()); err != nil {
					return err
				}
			case keyFile != "":
				if key, err = readCredential(keyFile, cmd.InOrStdin()); err != nil {
					return err
				}
			default:
				if key, err = readSecret(cmd.InOrStdin(), cmd.ErrOrStderr(), "API key for "+a.gateway+": "); err != nil {
					return err
				}
			}
			if key != "" && !auth.IsAPIKey(key) {
				return usagef("that is not an API key (they start with %q); for an access token, set LOOM_TOKEN instead", auth.APIKeyPrefix)
			}
			if key == "" && idToken == "" {
				return usagef("no API key given")
			}
			conn, err := a.client()
			if err != nil {
				return err
			}
			cl := loomv1.NewAuthServiceClient(conn)
			if link {
				// Only an API key links: the saved one vouches that the ID
				// token's account is the caller's own, and stays saved.
				saved, err := st.Get(a.gateway)
				if err != nil {
					return err
				}
				if saved == nil || saved.APIKey == "" {
					return usagef("--link needs a login with an API key first (loom auth login --key-file FILE): a token proves no more than the sign-in that gave it")
				}
				key = saved.APIKey
			}
			ctx, cancel := a.call(creds.WithCredential(cmd.Context(), key))
			defer cancel()
			e := &creds.Entry{APIKey: key}
			tok, err := cl.CreateToken(ctx, &loomv1.CreateTokenRequest{OidcIdToken: idToken})
			if link && err == nil {
				// The answer is the ID token's session; the key stays the
				// saved credential.
				fmt.Fprintf(cmd.OutOrStdout(), "Linked %s to the ID token's identity: it may now sign in with it.\n", tok.GetPrincipal().GetName())
			}
			switch {
			case err == nil:
				creds.Apply(e, tok)
			case codeOf(err) == codes.Unimplemented && key != "":
				// A gateway that mints no tokens takes the key itself.
				p, werr := cl.WhoAmI(ctx, &loomv1.WhoAmIRequest{})
				if werr != nil && codeOf(werr) != codes.Unimplemented {
					return a.explain("log in to "+a.gateway, werr)
				}
				e.Principal, e.User = p.GetName(), p.GetUser()
			default:
				return a.explainLogin(err)
			}
			if err := st.Put(a.gateway, e); err != nil {
				return err
			}
			who := e.Principal
			if who == "" {
				who = "your key"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Logged in to %s as %s%s; credentials saved in %s.\n", a.gateway, who, adminNote(tok.GetPrincipal()), st.Path())
			if a.getenv("LOOM_TOKEN") != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "Note: LOOM_TOKEN is set in this environment and wins over the saved login; unset it to use this one.")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&keyFile, "key-file", "", "read the API key from this file (- for stdin)")
	cmd.Flags().StringVar(&oidcFile, "oidc-token-file", "", "log in with the OIDC ID token in this file (- for stdin)")
	cmd.Flags().BoolVar(&link, "link", false, "with --oidc-token-file: present the current login too, binding your account to the ID token's identity (root and cluster administrators need this once)")
	return cmd
}

// explainLogin words a refused login.
func (a *app) explainLogin(err error) error {
	if codeOf(err) == codes.Unauthenticated {
		return fmt.Errorf("log in to %s: the gateway refused the credential: %s", a.gateway, statusMessage(err))
	}
	return a.explain("log in to "+a.gateway, err)
}

// adminNote is " (cluster administrator)" for one, else "".
func adminNote(p *loomv1.Principal) string {
	if p.GetClusterAdmin() {
		return " (cluster administrator)"
	}
	return ""
}

// readCredential reads a credential from path ("-": in), trimmed.
func readCredential(path string, in io.Reader) (string, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(in, auth.MaxTokenBytes+1))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return "", fmt.Errorf("read the credential: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if len(s) > auth.MaxTokenBytes {
		return "", usagef("the credential in %s is longer than %d bytes", path, auth.MaxTokenBytes)
	}
	return s, nil
}

// readSecret reads one line from in: on a terminal after prompt with
// echo off, so that the key does not show on the screen (nor in a
// terminal's scrollback); otherwise (a pipe) as it comes.
func readSecret(in io.Reader, prompt io.Writer, text string) (string, error) {
	f, ok := in.(*os.File)
	if ok && isTerminal(f) {
		fmt.Fprint(prompt, text)
		defer fmt.Fprintln(prompt)
		if restore, err := noEcho(int(f.Fd())); err == nil {
			defer restore()
		}
	}
	line, err := bufio.NewReader(io.LimitReader(in, auth.MaxTokenBytes+1)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the API key: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// noEcho turns the terminal's echo off and returns what turns it back on.
func noEcho(fd int) (restore func(), err error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	t := *old
	t.Lflag &^= unix.ECHO
	t.Lflag |= unix.ICANON | unix.ECHONL
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

func (a *app) authLogoutCommand() *cobra.Command {
	var revoke bool
	cmd := &cobra.Command{
		Use:   "logout",
		Short: "Forget the saved credential of the gateway (--revoke: end its API key too)",
		Long: `Remove the gateway's entry from the credentials file. Its refresh token
(an OIDC login's) is ended on the gateway. The API key it held keeps working
elsewhere unless --revoke is given, which revokes it on the gateway first
(calls with it are refused within 30 s).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.credStore()
			if err != nil {
				return err
			}
			e, err := st.Get(a.gateway)
			if err != nil {
				return err
			}
			if e == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "Not logged in to %s (no entry in %s).\n", a.gateway, st.Path())
				return nil
			}
			if revoke && e.APIKey != "" {
				id, _, err := auth.ParseAPIKey(e.APIKey)
				if err != nil {
					return err
				}
				if err := a.revokeKey(cmd.Context(), keyName(e.User, id)); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Revoked API key %s.\n", id)
			}
			if e.RefreshToken != "" {
				// Best effort: a gateway that is gone or refuses it leaves
				// a token that ends by itself.
				if cl, err := a.authService(); err == nil {
					ctx, cancel := a.call(creds.WithCredential(cmd.Context(), ""))
					_, _ = cl.RevokeToken(ctx, &loomv1.RevokeTokenRequest{RefreshToken: e.RefreshToken})
					cancel()
				}
			}
			if _, err := st.Delete(a.gateway); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Logged out of %s (its entry is gone from %s).\n", a.gateway, st.Path())
			return nil
		},
	}
	cmd.Flags().BoolVar(&revoke, "revoke", false, "revoke the saved API key on the gateway before forgetting it")
	return cmd
}

func (a *app) authWhoAmICommand() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show who the gateway takes you for: principal, kind, roles",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.whoAmI(cmd.Context())
			if err != nil {
				return a.explain("who am I", err)
			}
			out := cmd.OutOrStdout()
			if a.output == "json" {
				return writeJSON(out, p)
			}
			tw := newTable(out)
			row(tw, "PRINCIPAL", p.GetName())
			row(tw, "KIND", kindName(p.GetKind()))
			row(tw, "USER", p.GetUser())
			row(tw, "CLUSTER ADMIN", yesNo(p.GetClusterAdmin()))
			row(tw, "ROLES", roles(p.GetRoles()))
			row(tw, "CREDENTIAL", fmt.Sprintf("%s (from %s)", orDash(p.GetHow()), a.credFrom()))
			row(tw, "GATEWAY", a.gateway)
			return tw.Flush()
		},
	}
}

// credFrom says where the connection's credential came from.
func (a *app) credFrom() string {
	a.connMu.Lock()
	defer a.connMu.Unlock()
	if a.src == nil || a.src.From() == "" {
		return creds.FromNone
	}
	return a.src.From()
}

// kindName is a principal kind's lower-case name ("user", "node", ...).
func kindName(k loomv1.PrincipalKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "PRINCIPAL_KIND_"))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// roles renders a role map as "p1=admin, p2=viewer", sorted by project.
func roles(m map[string]string) string { return keyValues(m, ", ") }

// keyParent is "users/{user}", or "users/-" (the caller) for "".
func keyParent(user string) string {
	if user == "" {
		return "users/-"
	}
	return "users/" + user
}

// keyName is a key's resource name: "users/{user}/keys/{id}" ("users/-"
// when user is "": the caller's).
func keyName(user, id string) string {
	if strings.HasPrefix(id, "users/") {
		return id
	}
	return keyParent(user) + "/keys/" + id
}

func (a *app) authService() (loomv1.AuthServiceClient, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return loomv1.NewAuthServiceClient(c), nil
}

func (a *app) authKeysCreateCommand() *cobra.Command {
	var user, display string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create an API key (yours, or --user's as an administrator); its secret is shown once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ttl < 0 {
				return usagef("--ttl must not be negative")
			}
			cl, err := a.authService()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			k, err := cl.CreateApiKey(ctx, &loomv1.CreateApiKeyRequest{Parent: keyParent(user),
				Key: &loomv1.ApiKey{DisplayName: display}, TtlSeconds: int64(ttl / time.Second)})
			if err != nil {
				return a.explain("create an API key", err)
			}
			out := cmd.OutOrStdout()
			if a.output == "json" {
				return writeJSON(out, k)
			}
			owner, _, _ := strings.Cut(strings.TrimPrefix(k.GetName(), "users/"), "/")
			expires := "never expires"
			if k.GetExpireTime() != nil {
				expires = "expires " + k.GetExpireTime().AsTime().UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(out, "Created API key %s for %s (%s). Its secret is shown this once; keep it safe:\n\n  %s\n\n"+
				"Log in with it elsewhere: `loom auth login --key-file FILE` (or give it as LOOM_TOKEN).\n",
				k.GetKeyId(), owner, expires, k.GetSecret())
			return nil
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "the user the key is for (default you; another user's needs an administrator)")
	cmd.Flags().StringVar(&display, "display-name", "", "what the key is for, shown by \"loom auth keys list\"")
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "make the key expire after this long, e.g. 720h (default: never)")
	return cmd
}

func (a *app) authKeysListCommand() *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List API keys (yours, or --user's): ID NAME STATE AGE EXPIRES CREATOR",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.authService()
			if err != nil {
				return err
			}
			var keys []*loomv1.ApiKey
			err = paging.Each(func(token string) (string, error) {
				ctx, cancel := a.call(cmd.Context())
				defer cancel()
				resp, err := cl.ListApiKeys(ctx, &loomv1.ListApiKeysRequest{Parent: keyParent(user), PageToken: token})
				keys = append(keys, resp.GetKeys()...)
				return resp.GetNextPageToken(), err
			})
			if err != nil {
				return a.explain("list API keys", err)
			}
			out := cmd.OutOrStdout()
			if a.output == "json" {
				return writeJSON(out, &loomv1.ListApiKeysResponse{Keys: keys})
			}
			if len(keys) == 0 {
				fmt.Fprintln(out, "No API keys. `loom auth keys create` makes one.")
				return nil
			}
			now := a.now()
			tw := newTable(out)
			row(tw, "ID", "NAME", "STATE", "AGE", "EXPIRES", "CREATOR")
			for _, k := range keys {
				row(tw, k.GetKeyId(), k.GetDisplayName(), keyState(k, now), age(k.GetCreateTime(), now), keyExpiry(k, now), k.GetCreator())
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "whose keys (default yours; another user's needs an administrator)")
	return cmd
}

// keyState is "revoked", "expired" or "active".
func keyState(k *loomv1.ApiKey, now time.Time) string {
	switch {
	case k.GetRevokeTime() != nil:
		return "revoked"
	case k.GetExpireTime() != nil && !now.Before(k.GetExpireTime().AsTime()):
		return "expired"
	}
	return "active"
}

// keyExpiry is "never", "in 29d", or "-" once past.
func keyExpiry(k *loomv1.ApiKey, now time.Time) string {
	if k.GetExpireTime() == nil {
		return "never"
	}
	if d := k.GetExpireTime().AsTime().Sub(now); d > 0 {
		return "in " + humanDuration(d)
	}
	return "-"
}

func (a *app) authKeysRevokeCommand() *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API key: calls with it are refused within 30 s",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("give the key's id (`loom auth keys list` shows them), e.g. `loom auth keys revoke 3f2a9c0d1e4b5a67`")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if user == "" && !strings.HasPrefix(args[0], "users/") {
				user = a.userName(cmd.Context())
			}
			name := keyName(user, args[0])
			if err := a.revokeKey(cmd.Context(), name); err != nil {
				if codeOf(err) == codes.NotFound && !cmd.Flags().Changed("user") && !strings.HasPrefix(args[0], "users/") {
					// An id is looked up among the caller's own keys: an
					// administrator revoking a user's key by the id
					// `keys list --user U` showed met a bare not found.
					return fmt.Errorf("%w (`loom auth keys list` shows your keys; another user's key is revoked with --user USER, as `loom auth keys list --user USER` lists them)", err)
				}
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Revoked API key %s; calls with it are refused within 30 s.\n", name)
			return nil
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "whose key (default yours; another user's needs an administrator)")
	return cmd
}

// revokeKey revokes the key of that resource name.
func (a *app) revokeKey(ctx context.Context, name string) error {
	cl, err := a.authService()
	if err != nil {
		return err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	if _, err := cl.RevokeApiKey(cctx, &loomv1.RevokeApiKeyRequest{Name: name}); err != nil {
		return a.explain("revoke API key "+name, err)
	}
	return nil
}

// statusMessage is a gRPC error's message without its code.
func statusMessage(err error) string { return status.Convert(err).Message() }
