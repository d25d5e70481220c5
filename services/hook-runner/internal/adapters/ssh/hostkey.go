package ssh

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// HostKeyError reports a host key that failed verification. It is never
// retried: a changed key may be a man-in-the-middle, and an unknown one
// needs an operator (or trust-on-first-use) to become known.
type HostKeyError struct {
	Addr string
	// Fingerprint is the presented key's SHA256 fingerprint.
	Fingerprint string
	Reason      string
}

func (e *HostKeyError) Error() string {
	return fmt.Sprintf("host key verification failed for %s (%s): %s", e.Addr, e.Fingerprint, e.Reason)
}

// knownHosts is a parsed set of known_hosts files. Verification itself is
// golang.org/x/crypto/ssh/knownhosts; the extra sets let us tell "unknown"
// from "changed" (knownhosts reports @cert-authority keys among the wanted
// keys of a mismatch) and refuse revoked keys before falling back.
type knownHosts struct {
	check   ssh.HostKeyCallback
	ca      map[string]bool // marshalled @cert-authority keys
	revoked map[string]bool // marshalled @revoked keys
}

func loadKnownHosts(files []string) (*knownHosts, error) {
	cb, err := knownhosts.New(files...)
	if err != nil {
		return nil, fmt.Errorf("loading known_hosts: %w", err)
	}
	kh := &knownHosts{check: cb, ca: map[string]bool{}, revoked: map[string]bool{}}
	for _, f := range files {
		if err := kh.scanMarkers(f); err != nil {
			return nil, err
		}
	}
	return kh, nil
}

// scanMarkers records the keys of @cert-authority and @revoked lines.
func (kh *knownHosts) scanMarkers(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("reading known_hosts %s: %w", file, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || (fields[0] != "@cert-authority" && fields[0] != "@revoked") {
			continue
		}
		key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(strings.Join(fields[2:], " ")))
		if err != nil {
			return fmt.Errorf("known_hosts %s:%d: %w", file, n, err)
		}
		if fields[0] == "@cert-authority" {
			kh.ca[string(key.Marshal())] = true
		} else {
			kh.revoked[string(key.Marshal())] = true
		}
	}
	return sc.Err()
}

// errUnknownHost means known_hosts has nothing to say about the host (it
// lists no key and no trusted CA for it).
var errUnknownHost = errors.New("host is not in known_hosts and no trusted host CA signed its key")

// verify checks key for addr. It returns nil, errUnknownHost, or an error
// describing a mismatch or revocation.
//
// A certificate is checked against @cert-authority lines first; if that
// fails for any reason but revocation, the certificate's plain key is
// checked against the host's key lines, as OpenSSH does.
func (kh *knownHosts) verify(addr string, remote net.Addr, key ssh.PublicKey) error {
	plain := key
	if cert, ok := key.(*ssh.Certificate); ok {
		if kh.revoked[string(cert.SignatureKey.Marshal())] || kh.revoked[string(cert.Key.Marshal())] {
			return errors.New("host key or its certificate authority is revoked")
		}
		certErr := kh.check(addr, remote, cert)
		if certErr == nil {
			return nil
		}
		plain = cert.Key
		if err := kh.verifyPlain(addr, remote, plain); !errors.Is(err, errUnknownHost) {
			return err
		}
		// certErr is detail only: wrapping it would let callers match a
		// knownhosts.KeyError that the plain-key fallback has overruled.
		return fmt.Errorf("%w (certificate: %s)", errUnknownHost, certErr.Error())
	}
	return kh.verifyPlain(addr, remote, plain)
}

func (kh *knownHosts) verifyPlain(addr string, remote net.Addr, key ssh.PublicKey) error {
	err := kh.check(addr, remote, key)
	var keyErr *knownhosts.KeyError
	var revErr *knownhosts.RevokedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &revErr):
		return errors.New("host key is revoked")
	case errors.As(err, &keyErr):
		if len(kh.hostKeys(keyErr.Want)) == 0 {
			return errUnknownHost
		}
		return fmt.Errorf("host key does not match known_hosts (%s); it may have been replaced, or this is a man-in-the-middle", describeKnown(kh.hostKeys(keyErr.Want)))
	default:
		return err
	}
}

// hostKeys drops CA keys from a knownhosts mismatch's wanted keys.
func (kh *knownHosts) hostKeys(want []knownhosts.KnownKey) []knownhosts.KnownKey {
	var out []knownhosts.KnownKey
	for _, k := range want {
		if !kh.ca[string(k.Key.Marshal())] {
			out = append(out, k)
		}
	}
	return out
}

// algorithmsFor lists host key algorithms matching the plain keys
// known_hosts records for addr, so the server presents one of those rather
// than another type it also has (which would look like a mismatch). Nil
// means no plain keys are known: keep the default order, which asks for
// certificates first.
func (kh *knownHosts) algorithmsFor(addr string, remote net.Addr) []string {
	var keyErr *knownhosts.KeyError
	if err := kh.check(addr, remote, probeKey); !errors.As(err, &keyErr) {
		return nil
	}
	var types []string
	for _, k := range kh.hostKeys(keyErr.Want) {
		types = append(types, k.Key.Type())
	}
	return algorithmsForTypes(types)
}

func describeKnown(keys []knownhosts.KnownKey) string {
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d %s", k.Filename, k.Line, ssh.FingerprintSHA256(k.Key)))
	}
	return "known: " + strings.Join(parts, ", ")
}

// algorithmsForTypes maps key types to host key algorithms, certificate
// variants first.
func algorithmsForTypes(types []string) []string {
	var certs, plain []string
	add := func(list *[]string, algos ...string) {
		for _, a := range algos {
			if !slices.Contains(*list, a) {
				*list = append(*list, a)
			}
		}
	}
	for _, t := range types {
		switch t {
		case ssh.KeyAlgoRSA:
			add(&certs, ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01)
			add(&plain, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256)
		case ssh.KeyAlgoED25519:
			add(&certs, ssh.CertAlgoED25519v01)
			add(&plain, t)
		case ssh.KeyAlgoECDSA256:
			add(&certs, ssh.CertAlgoECDSA256v01)
			add(&plain, t)
		case ssh.KeyAlgoECDSA384:
			add(&certs, ssh.CertAlgoECDSA384v01)
			add(&plain, t)
		case ssh.KeyAlgoECDSA521:
			add(&certs, ssh.CertAlgoECDSA521v01)
			add(&plain, t)
		default:
			add(&plain, t)
		}
	}
	if len(plain) == 0 {
		return nil
	}
	return append(certs, plain...)
}

// probeKey is a key no known_hosts file lists: checking it makes knownhosts
// reveal which keys it holds for an address.
var probeKey ssh.PublicKey = func() ssh.PublicKey {
	// Any 32 bytes parse as an ed25519 public key; this one is only ever
	// compared, never used to verify a signature.
	k, err := ssh.ParsePublicKey(ssh.Marshal(struct {
		Name string
		Key  []byte
	}{ssh.KeyAlgoED25519, bytes.Repeat([]byte{0x42}, 32)}))
	if err != nil {
		panic(fmt.Sprintf("building probe key: %v", err))
	}
	return k
}()

// hostKeyPolicy decides which host keys to trust for one connection.
type hostKeyPolicy struct {
	known *watched[*knownHosts] // nil without known_hosts files
	tofu  bool
}

// describe names what verifies a connection with the given pin, for
// traces: "pinned", "known_hosts", "known_hosts+tofu" or "tofu".
func (p *hostKeyPolicy) describe(pinned ssh.PublicKey) string {
	switch {
	case pinned != nil:
		return "pinned"
	case p.known != nil && p.tofu:
		return "known_hosts+tofu"
	case p.known != nil:
		return "known_hosts"
	default:
		return "tofu"
	}
}

// verifier is the per-connection verification state.
type verifier struct {
	addr   string
	pinned ssh.PublicKey
	policy *hostKeyPolicy
	known  *knownHosts

	// accepted is the presented key (authorized_keys format) when it was
	// trusted by pin or on first use.
	accepted string
	// failure is set when the callback refused the key.
	failure *HostKeyError
}

func (p *hostKeyPolicy) verifier(addr string, pinned ssh.PublicKey) *verifier {
	v := &verifier{addr: addr, pinned: pinned, policy: p}
	if p.known != nil {
		v.known = p.known.get()
	}
	return v
}

// algorithms returns the HostKeyAlgorithms for the connection (nil = default).
func (v *verifier) algorithms(remote net.Addr) []string {
	if v.pinned != nil {
		return algorithmsForTypes([]string{v.pinned.Type()})
	}
	if v.known != nil {
		return v.known.algorithmsFor(v.addr, remote)
	}
	return nil
}

// callback is the ssh.HostKeyCallback.
func (v *verifier) callback(addr string, remote net.Addr, key ssh.PublicKey) error {
	plain := key
	if cert, ok := key.(*ssh.Certificate); ok {
		plain = cert.Key // the handshake proved possession of this key
	}
	refuse := func(reason string) error {
		v.failure = &HostKeyError{Addr: addr, Fingerprint: ssh.FingerprintSHA256(plain), Reason: reason}
		return v.failure
	}
	if v.pinned != nil {
		if !bytes.Equal(plain.Marshal(), v.pinned.Marshal()) {
			return refuse(fmt.Sprintf("does not match the key pinned at first contact (%s)", ssh.FingerprintSHA256(v.pinned)))
		}
		v.accepted = authorizedKey(plain)
		return nil
	}
	if v.known != nil {
		err := v.known.verify(addr, remote, key)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errUnknownHost) || !v.policy.tofu {
			return refuse(err.Error())
		}
	} else if !v.policy.tofu {
		return refuse("no known_hosts configured and trust-on-first-use is off")
	}
	v.accepted = authorizedKey(plain)
	return nil
}

func authorizedKey(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// parsePinned parses a pinned host key in authorized_keys format.
func parsePinned(s string) (ssh.PublicKey, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("invalid pinned host key: %w", err)
	}
	if cert, ok := k.(*ssh.Certificate); ok {
		k = cert.Key
	}
	return k, nil
}
