package cvmemu

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
)

// ECS requests are signed with ACS3-HMAC-SHA256 (signature v3), what the
// darabonba-openapi client the official ECS SDK is built on sends unless
// told otherwise: an Authorization header
//
//	ACS3-HMAC-SHA256 Credential=<AccessKeyId>,SignedHeaders=a;b,Signature=<hex>
//
// over a canonical request made of the method, path, sorted query, the
// signed headers (host and every x-acs-* one) and the hex SHA-256 of the
// body, which x-acs-content-sha256 also carries. The signature is the hex
// HMAC-SHA256 of "ACS3-HMAC-SHA256\n" + hex(SHA-256(canonical request)),
// keyed with the AccessKeySecret.

const acs3Algorithm = "ACS3-HMAC-SHA256"

// acs3Auth is a parsed Authorization header.
type acs3Auth struct {
	accessKeyID   string
	signedHeaders []string
	signature     string
}

func parseACS3Authorization(h string) (acs3Auth, *apiError) {
	bad := func(why string) (acs3Auth, *apiError) {
		return acs3Auth{}, errf(ecsCodeIncompleteSignature, "The request signature does not conform to Aliyun standards: %s.", why)
	}
	f, why := parseAuthorization(h, acs3Algorithm)
	if why != "" {
		return bad("Authorization: " + why)
	}
	a := acs3Auth{accessKeyID: f.credential, signedHeaders: f.signedHeaders, signature: f.signature}
	if !slices.IsSorted(a.signedHeaders) {
		return bad("SignedHeaders must be sorted")
	}
	for _, must := range []string{"host", "x-acs-date", "x-acs-signature-nonce", "x-acs-content-sha256"} {
		if !slices.Contains(a.signedHeaders, must) {
			return bad("SignedHeaders must include " + must)
		}
	}
	return a, nil
}

// verifyACS3 authenticates an ECS request and returns its AccessKeyId. The
// checks follow the real gateway: syntax, timestamp, AccessKeyId, nonce,
// then the signature.
func (e *Emulator) verifyACS3(r *http.Request, body []byte) (string, *apiError) {
	if r.Header.Get("Authorization") == "" && r.URL.Query().Has("Signature") {
		return "", errf(ecsCodeIncompleteSignature,
			"The request signature does not conform to Aliyun standards: the emulator verifies %s (the SDK's default), not the v1 Signature parameter.", acs3Algorithm)
	}
	auth, aerr := parseACS3Authorization(r.Header.Get("Authorization"))
	if aerr != nil {
		return "", aerr
	}
	date := r.Header.Get("x-acs-date")
	ts, err := time.Parse("2006-01-02T15:04:05Z", date)
	if err != nil {
		return "", errf(ecsCodeInvalidTimeStampFormat, "Specified time stamp or date value is not well formatted (x-acs-date %q).", date)
	}
	now := e.now()
	if skew := now.Sub(ts); skew > e.cfg.MaxClockSkew || -skew > e.cfg.MaxClockSkew {
		return "", errf(ecsCodeInvalidTimeStampExpired,
			"Specified time stamp or date value is expired: %s, server time %s, allowed skew %s.",
			date, now.UTC().Format("2006-01-02T15:04:05Z"), e.cfg.MaxClockSkew)
	}
	nonce := r.Header.Get("x-acs-signature-nonce")
	if nonce == "" {
		return "", errf(ecsCodeMissingNonce, "SignatureNonce (x-acs-signature-nonce) is mandatory for this action.")
	}
	secret, ok := e.cfg.Credentials[auth.accessKeyID]
	if !ok {
		return "", errf(ecsCodeAccessKeyNotFound, "Specified access key is not found.")
	}
	if r.Header.Get("x-acs-security-token") != "" {
		return "", errf(ecsCodeSecurityTokenMalformed, "Temporary credentials (STS security tokens) are not supported by the emulator.")
	}
	if r.Header.Get("x-acs-content-sha256") != sha256Hex(body) {
		return "", errf(ecsCodeSignatureMismatch, "Specified signature is not matched with our calculation: x-acs-content-sha256 is not the SHA-256 of the body.")
	}
	want := acs3Signature(secret, r, auth.signedHeaders, sha256Hex(body))
	if !hmac.Equal([]byte(want), []byte(strings.ToLower(auth.signature))) {
		return "", errf(ecsCodeSignatureMismatch, "Specified signature is not matched with our calculation.")
	}
	// The nonce is spent only by a correctly signed request, so a forged
	// one cannot burn a client's nonces.
	if !e.spendNonce(auth.accessKeyID+"/"+nonce, ts) {
		return "", errf(ecsCodeSignatureNonceUsed, "Specified signature nonce was used already.")
	}
	return auth.accessKeyID, nil
}

// spendNonce records a signature nonce; false if it was seen within the
// clock skew window (older ones are rejected as expired anyway).
func (e *Emulator) spendNonce(key string, ts time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	// Pruning whenever the map doubled keeps it bounded by the request
	// rate over the skew window, at amortised constant cost.
	if len(e.nonces) >= e.noncePrune {
		for k, t := range e.nonces {
			if now.Sub(t) > e.cfg.MaxClockSkew {
				delete(e.nonces, k)
			}
		}
		e.noncePrune = max(1024, 2*len(e.nonces))
	}
	if _, used := e.nonces[key]; used {
		return false
	}
	e.nonces[key] = ts
	return true
}

// acs3Signature computes the hex ACS3-HMAC-SHA256 signature of r.
func acs3Signature(secret string, r *http.Request, signedHeaders []string, payloadHash string) string {
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	var headers strings.Builder
	for _, name := range signedHeaders {
		vals := r.Header.Values(name)
		if name == "host" {
			vals = []string{r.Host} // net/http moves Host out of the header map
		}
		trimmed := make([]string, 0, len(vals))
		for _, v := range vals {
			trimmed = append(trimmed, strings.TrimSpace(v))
		}
		sort.Strings(trimmed)
		headers.WriteString(name + ":" + strings.Join(trimmed, ",") + "\n")
	}
	canonical := strings.Join([]string{
		r.Method,
		path,
		canonicalQuery(r.URL.Query()),
		headers.String(),
		strings.Join(signedHeaders, ";"),
		payloadHash,
	}, "\n")
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(acs3Algorithm + "\n" + sha256Hex([]byte(canonical))))
	return hex.EncodeToString(m.Sum(nil))
}

// canonicalQuery sorts the parameters and percent-encodes them (RFC 3986:
// space as %20, '*' encoded, '~' not).
func canonicalQuery(q url.Values) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(q)) {
		vals := slices.Clone(q[k])
		sort.Strings(vals)
		for _, v := range vals {
			parts = append(parts, percentEncode(k)+"="+percentEncode(v))
		}
	}
	return strings.Join(parts, "&")
}

func percentEncode(s string) string {
	s = url.QueryEscape(s)
	s = strings.ReplaceAll(s, "+", "%20")
	s = strings.ReplaceAll(s, "*", "%2A")
	return strings.ReplaceAll(s, "%7E", "~")
}
