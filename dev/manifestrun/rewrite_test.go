package manifestrun

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The one transformation between the manifests and this machine (see
// pod.rewrite), on the shapes the manifests use.
func TestRewrite(t *testing.T) {
	nats0 := &pod{name: "nats-0", root: "/r/nats-0", ports: map[int32]int{4222: 14222, 6222: 16222, 8222: 18222}}
	nats1 := &pod{name: "nats-1", root: "/r/nats-1", ports: map[int32]int{4222: 14223, 6222: 16223}}
	addrs := addresses{
		"nats:4222":                 {{nats0, 14222}, {nats1, 14223}},
		"nats.ns.svc:4222":          {{nats0, 14222}, {nats1, 14223}},
		"nats-1.nats-headless:6222": {{nats1, 16223}},
	}
	c := &corev1.Container{VolumeMounts: []corev1.VolumeMount{{MountPath: "/etc/nats"}, {MountPath: "/data"}, {MountPath: "/var/run/nats"}}}
	for _, tc := range []struct{ in, want string }{
		{"/etc/nats/nats.conf", "/r/nats-0/etc/nats/nats.conf"},
		{"--config=/etc/nats/nats.conf", "--config=/r/nats-0/etc/nats/nats.conf"},
		{"store_dir: /data\n", "store_dir: /r/nats-0/data\n"},
		{"pid_file: /var/run/nats/nats.pid", "pid_file: /r/nats-0/var/run/nats/nats.pid"},
		{"/etc/natsx/a", "/etc/natsx/a"}, // not inside a mount
		{"/opt/data/x", "/opt/data/x"},   // a mount path only as a suffix
		{":9999", ":9999"},               // not a port of this pod
		{":6222", "127.0.0.1:16222"},
		{"listen: 0.0.0.0:4222", "listen: 127.0.0.1:14222"},
		{"API_SERVER: 10.0.0.10:4222", "API_SERVER: 10.0.0.10:4222"}, // another host's port
		{"nats://nats:4222", "nats://127.0.0.1:14222,nats://127.0.0.1:14223"},
		{"nats.ns.svc:4222", "127.0.0.1:14222"}, // no scheme: one endpoint
		{"  nats://nats-1.nats-headless:6222\n", "  nats://127.0.0.1:16223\n"},
		{"nats://other:4222", "nats://other:4222"},
	} {
		if got := nats0.rewrite(c, addrs, tc.in); got != tc.want {
			t.Errorf("rewrite(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Already rewritten values stay as they are.
	once := nats0.rewrite(c, addrs, "/etc/nats/nats.conf")
	if twice := nats0.rewrite(c, addrs, once); twice != once {
		t.Errorf("rewrite is not idempotent: %q -> %q", once, twice)
	}
}

func TestLoopbackNames(t *testing.T) {
	a := addresses{"nats:4222": nil, "nats-0.nats-headless.ns.svc:6222": nil}
	for name, want := range map[string]bool{
		"nats": true, "*.nats-headless.ns.svc": true, "nats-0.nats-headless.ns.svc": true,
		"*.nats-headless": false, "api-gateway": false,
	} {
		if got := a.loopback(name); got != want {
			t.Errorf("loopback(%q) = %v, want %v", name, got, want)
		}
	}
}
