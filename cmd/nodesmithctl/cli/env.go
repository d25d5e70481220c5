package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/client"
	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/config"
)

// loadConfig reads the configuration file (--config, $NODESMITHCONFIG or
// the default path).
func (e *Env) loadConfig() (*config.File, error) {
	path := e.ConfigPath
	if path == "" {
		var err error
		if path, err = config.DefaultPath(); err != nil {
			return nil, err
		}
	}
	return config.Load(path)
}

// Target is where a command's requests go, after the flags overrode the
// context.
type Target struct {
	Context   string
	Server    string
	TokenFile string
	CAFile    string
}

// target resolves the context and the flags.
func (e *Env) target() (Target, error) {
	f, err := e.loadConfig()
	if err != nil {
		return Target{}, err
	}
	name := e.Context
	if name == "" {
		name = f.CurrentContext
	}
	var t Target
	if name != "" {
		c, ok := f.Context(name)
		if !ok {
			return Target{}, fmt.Errorf("context %q is not in %s (nodesmithctl config get-contexts)", name, f.Path())
		}
		t = Target{Context: name, Server: c.Server, TokenFile: f.Resolve(c.TokenFile), CAFile: f.Resolve(c.CertificateAuthority)}
	}
	if e.Server != "" {
		t.Server = e.Server
	}
	if e.TokenFile != "" {
		t.TokenFile = e.TokenFile
	}
	if e.CAFile != "" {
		t.CAFile = e.CAFile
	}
	if t.Server == "" {
		return Target{}, errors.New("no server: create a context (nodesmithctl config set-context NAME --server URL --token-file FILE) or pass --server")
	}
	if t.TokenFile == "" {
		return Target{}, errors.New("no token file: set one in the context (config set-context NAME --token-file FILE) or pass --token-file")
	}
	return t, nil
}

// client returns a client for the resolved target.
func (e *Env) client() (*client.Client, error) {
	t, err := e.target()
	if err != nil {
		return nil, err
	}
	token, err := client.ReadTokenFile(t.TokenFile)
	if err != nil {
		return nil, err
	}
	if plaintextRemote(t.Server) {
		fmt.Fprintf(e.ErrOut, "warning: %s is plain http: the bearer token crosses the network unencrypted (use https)\n", t.Server)
	}
	return client.New(client.Config{Server: t.Server, Token: token, CAFile: t.CAFile, UserAgent: "nodesmithctl"})
}

// plaintextRemote reports an http:// server that is not on this machine.
func plaintextRemote(server string) bool {
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "http" {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

// requestContext bounds one command's requests (not watch streams).
func requestContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, client.DefaultTimeout)
}
