package manifestrun

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// issued is a certificate and its key.
type issued struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	keyPEM  []byte
}

// issueCertificates plays cert-manager: every Certificate of the rendering
// is issued and written as the Secret it names (tls.crt, tls.key, ca.crt),
// with its commonName, dnsNames, uris, usages and isCA. Its issuer is
// followed as cert-manager would: a selfSigned Issuer signs the
// certificate with its own key; a ca Issuer signs with the certificate in
// its secretName (itself a Certificate of the rendering, issued first);
// any other issuer (one the rendering does not hold, e.g. an
// organisation's ClusterIssuer) is played by a test CA.
//
// Part of the address rewrite (pod.rewrite): a server certificate ("server
// auth", or cert-manager's default usages) with a DNS name that the
// rewrite maps to loopback also gets the IP SAN 127.0.0.1, the address
// its clients now dial and check it against (NATS clients and routes
// check the host of the URL they dial; they cannot be told a server name).
func issueCertificates(t *testing.T, r *rendering, loopback func(dnsName string) bool) {
	t.Helper()
	issuers := map[string]*unstructured.Unstructured{}
	for _, o := range r.ofKind("Issuer") {
		issuers[o.GetName()] = o
	}
	certs := r.ofKind("Certificate")
	bySecret := map[string]*issued{}
	testCA := newCert(t, "manifestrun test CA", nil, nil, nil, nil, true, nil)
	done := map[string]bool{}
	// Issue in dependency order: a ca Issuer's certificate before those it signs.
	for len(done) < len(certs) {
		progress := false
		for _, o := range certs {
			if done[o.GetName()] {
				continue
			}
			spec, _, _ := unstructured.NestedMap(o.Object, "spec")
			secretName, _, _ := unstructured.NestedString(spec, "secretName")
			issuerName, _, _ := unstructured.NestedString(spec, "issuerRef", "name")
			issuerKind, _, _ := unstructured.NestedString(spec, "issuerRef", "kind")
			var signer *issued
			selfSigned := false
			if iss, ok := issuers[issuerName]; ok && (issuerKind == "" || issuerKind == "Issuer") {
				if _, ok, _ := unstructured.NestedMap(iss.Object, "spec", "selfSigned"); ok {
					selfSigned = true
				} else if caSecret, ok, _ := unstructured.NestedString(iss.Object, "spec", "ca", "secretName"); ok {
					if signer = bySecret[caSecret]; signer == nil {
						continue // its CA is not issued yet
					}
				} else {
					signer = testCA
				}
			} else {
				signer = testCA
			}
			cn, _, _ := unstructured.NestedString(spec, "commonName")
			dns, _, _ := unstructured.NestedStringSlice(spec, "dnsNames")
			uris, _, _ := unstructured.NestedStringSlice(spec, "uris")
			usages, _, _ := unstructured.NestedStringSlice(spec, "usages")
			isCA, _, _ := unstructured.NestedBool(spec, "isCA")
			var parsed []*url.URL
			for _, u := range uris {
				pu, err := url.Parse(u)
				if err != nil {
					t.Fatalf("Certificate %s: uri %q: %v", o.GetName(), u, err)
				}
				parsed = append(parsed, pu)
			}
			var ips []net.IP
			if !isCA && (len(usages) == 0 || slices.Contains(usages, "server auth")) && slices.ContainsFunc(dns, loopback) {
				ips = []net.IP{net.IPv4(127, 0, 0, 1)}
			}
			var c *issued
			if selfSigned {
				c = newCert(t, cn, dns, ips, parsed, usages, isCA, nil)
				signer = c
			} else {
				c = newCert(t, cn, dns, ips, parsed, usages, isCA, signer)
			}
			bySecret[secretName] = c
			r.secrets[secretName] = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: r.namespace},
				Type:       corev1.SecretTypeTLS,
				Data:       map[string][]byte{"tls.crt": c.certPEM, "tls.key": c.keyPEM, "ca.crt": signer.certPEM},
			}
			done[o.GetName()] = true
			progress = true
		}
		if !progress {
			t.Fatal("Certificates whose ca Issuer's certificate is never issued (a cycle or a missing Certificate)")
		}
	}
}

var serial int64

func newCert(t *testing.T, cn string, dns []string, ips []net.IP, uris []*url.URL, usages []string, isCA bool, parent *issued) *issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     dns,
		IPAddresses:  ips,
		URIs:         uris,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	}
	for _, u := range usages {
		switch u {
		case "server auth":
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		case "client auth":
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		}
	}
	// cert-manager's default usages: digital signature, key encipherment
	// and server auth.
	if len(usages) == 0 && !isCA {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	parentCert, parentKey := tmpl, key
	if parent != nil {
		parentCert, parentKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &issued{
		cert: cert, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}
