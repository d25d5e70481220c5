package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nodesmith/nodesmith/libs/health"
	kube "github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/kubernetes"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/leader"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/prom"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// errNoCluster is the start-up failure of auto mode without a cluster.
var errNoCluster = errors.New("no Kubernetes cluster configured: run in a pod, give --kubeconfig, " +
	"or choose no-cluster mode explicitly with --cluster=none (instances then count as Running as soon as their after_created hook succeeded)")

// useKubernetes decides whether this run uses a Kubernetes client.
func (c Config) useKubernetes(deps Deps) (bool, error) {
	switch c.Cluster {
	case ClusterKubernetes:
		return true, nil
	case ClusterNone:
		return false, nil
	}
	if deps.Cluster != nil {
		// A host that injects its cluster (the embedded launcher) wants no
		// Kubernetes client unless it asks for one.
		return false, nil
	}
	if kube.InCluster() || c.Kubeconfig != "" {
		return true, nil
	}
	return false, errNoCluster
}

// adapters are the cluster-facing adapters of one run.
type adapters struct {
	cluster  ports.Cluster
	leader   ports.Leader
	notifier ports.Notifier
	status   ports.StatusSink
	// clusterID is Config.ClusterID, or the default for this cluster.
	clusterID string
	// stop releases what they hold (the event broadcaster).
	stop func()
}

// clusterAdapters builds the cluster, leader, notifier and status adapters
// from the configuration and the injected dependencies, and settles the
// cluster id.
func clusterAdapters(ctx context.Context, cfg Config, deps Deps, log *slog.Logger, checks *health.Checks, metrics *prom.ServiceMetrics) (adapters, error) {
	out := adapters{cluster: deps.Cluster, leader: deps.Leader, clusterID: cfg.ClusterID, stop: func() {}}
	useKube, err := cfg.useKubernetes(deps)
	if err != nil {
		return out, err
	}
	if !useKube {
		if out.clusterID == "" {
			out.clusterID = DefaultLocalClusterID
			log.Info("no --cluster-id: using the default of runs without Kubernetes; give each cluster sharing a cloud account its own",
				"cluster_id", out.clusterID)
		}
		if out.leader == nil {
			if cfg.LeaderElect && cfg.Cluster == ClusterNone {
				log.Warn("leader election needs Kubernetes: this process always leads; run a single replica")
			}
			out.leader = &leader.Always{Logger: log}
		}
		return out, nil
	}
	kube.RouteKlog(log)
	restCfg, err := kube.RESTConfig(kube.ClientOptions{Kubeconfig: cfg.Kubeconfig, QPS: float32(cfg.KubeQPS), Burst: cfg.KubeBurst})
	if err != nil {
		return out, err
	}
	client, err := kube.NewClientset(restCfg)
	if err != nil {
		return out, err
	}
	ns := cfg.Namespace
	if ns == "" {
		ns = kube.DefaultNamespace()
	}
	identity := cfg.LeaderElectIdentity
	if identity == "" {
		identity = kube.DefaultIdentity()
	}
	log.Info("using Kubernetes", "host", restCfg.Host, "namespace", ns, "identity", identity)
	if out.clusterID == "" {
		// Never a constant two clusters could share: the reconciler would
		// take each other's VMs for orphans.
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out.clusterID, err = kube.DerivedClusterID(dctx, client)
		cancel()
		if err != nil {
			return out, fmt.Errorf("no --cluster-id given and none derived: %w (set --cluster-id; an existing install keeps the id its VMs carry)", err)
		}
		log.Info("no --cluster-id: derived from the cluster (set it explicitly to keep the id of VMs created under another)", "cluster_id", out.clusterID)
	}
	if out.cluster == nil {
		out.cluster = kube.NewCluster(client, log)
	}
	if out.leader == nil {
		if cfg.LeaderElect {
			l, err := kube.NewLeader(client, kube.LeaderOptions{
				Namespace: ns, Name: cfg.LeaseName, Identity: identity,
				LeaseDuration: cfg.LeaderElectLeaseDuration, RenewDeadline: cfg.LeaderElectRenewDeadline,
				RetryPeriod: cfg.LeaderElectRetryPeriod,
			}, log)
			if err != nil {
				return out, fmt.Errorf("leader election: %w", err)
			}
			checks.Add("lifecycle-leader-election", l.Check)
			out.leader = l
		} else {
			log.Warn("leader election disabled: this process always leads; run a single replica")
			out.leader = &leader.Always{Logger: log}
		}
	}
	if cfg.KubeEvents {
		ev := kube.NewEvents(client, identity, metrics.EventDropped, log)
		out.notifier = ev
		out.stop = ev.Stop
	}
	if cfg.StatusConfigMap != "" {
		out.status = kube.NewStatusConfigMap(client, ns, cfg.StatusConfigMap, identity)
	}
	return out, nil
}
