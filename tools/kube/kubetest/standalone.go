package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// FindEtcd returns the path of the etcd binary (EtcdPackage), or an error
// naming the package to install. Start does the same for tests.
func FindEtcd() (string, error) {
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd", nil
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("etcd not found: install the Debian package %s (apt-get install %s)", EtcdPackage, EtcdPackage)
}

// StartStandalone is Start for programs that are not tests (the chaos
// harness): it runs etcd and kube-apiserver with their data, certificates
// and logs under dir, which must exist, and returns the cluster and a
// function that stops both. It builds kube-apiserver first when the cache
// has none (logf reports the build). ctx bounds the start-up only.
func StartStandalone(ctx context.Context, dir string, logf func(format string, args ...any)) (c *Cluster, stop func(), err error) {
	etcdBin, err := FindEtcd()
	if err != nil {
		return nil, nil, fmt.Errorf("kubetest: %w", err)
	}
	apiServerBin, err := EnsureAPIServer(ctx, logf)
	if err != nil {
		return nil, nil, fmt.Errorf("kubetest: kube-apiserver %s is unavailable: %w", KubernetesVersion, err)
	}
	p, err := newPKI(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("kubetest: generating certificates: %w", err)
	}
	c = &Cluster{pki: p}
	stop = func() {
		if c.apiServer != nil {
			c.apiServer.stop(stopGrace)
		}
		if c.etcd != nil {
			c.etcd.stop(stopGrace)
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	if c.etcd, c.EtcdURL, err = startEtcd(ctx, etcdBin, dir); err != nil {
		return nil, nil, fmt.Errorf("kubetest: %w", err)
	}
	if c.apiServer, c.Host, err = startAPIServer(ctx, apiServerBin, dir, c.EtcdURL, p); err != nil {
		return nil, nil, fmt.Errorf("kubetest: %w", err)
	}
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err = c.writeKubeconfig(); err != nil {
		return nil, nil, fmt.Errorf("kubetest: writing kubeconfig: %w", err)
	}
	return c, stop, nil
}

// APIServerExited returns kube-apiserver's exit error once it has exited
// on its own, and nil while it runs: a long-lived user (the chaos harness)
// checks it so a dead API server fails the run instead of every Kubernetes
// call timing out.
func (c *Cluster) APIServerExited() error {
	if c.apiServer == nil {
		return errors.New("kube-apiserver not started")
	}
	select {
	case <-c.apiServer.exited():
		return c.apiServer.exitError()
	default:
		return nil
	}
}
