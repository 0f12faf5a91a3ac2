//go:build cluster

package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// identity is one static token of the API server's --token-auth-file.
type identity struct {
	user   string
	groups []string
	token  string
}

// pki is what the control plane and the nodes authenticate with, all made
// fresh per run: a CA, the API server's serving certificate (its SANs hold
// the loopback address and the address guests reach it at), the
// service-account signing key and one static token per identity.
type pki struct {
	dir        string
	caCert     string // PEM file
	caKey      string
	serverCert string
	serverKey  string
	saKey      string // RSA private key, PEM (PKCS#1)
	saPub      string // its public key, PEM (PKIX)
	tokens     string // the --token-auth-file CSV
	ids        map[string]identity
}

// newPKI writes the files under dir. users: each identity's user name and
// its groups.
func newPKI(dir string, ips []net.IP, dnsNames []string, users map[string][]string) (*pki, error) {
	p := &pki{
		dir:        dir,
		caCert:     filepath.Join(dir, "ca.crt"),
		caKey:      filepath.Join(dir, "ca.key"),
		serverCert: filepath.Join(dir, "apiserver.crt"),
		serverKey:  filepath.Join(dir, "apiserver.key"),
		saKey:      filepath.Join(dir, "sa.key"),
		saPub:      filepath.Join(dir, "sa.pub"),
		tokens:     filepath.Join(dir, "tokens.csv"),
		ids:        map[string]identity{},
	}
	now := time.Now().Add(-time.Hour)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "rdma-chain-test-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(48 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("serving key: %w", err)
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now,
		NotAfter:     now.Add(48 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  ips,
		DNSNames:     dnsNames,
	}, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	files := []struct {
		path, typ string
		der       []byte
	}{
		{p.caCert, "CERTIFICATE", caDER},
		{p.serverCert, "CERTIFICATE", srvDER},
		{p.saKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)},
		{p.saPub, "PUBLIC KEY", saPub},
	}
	for _, k := range []struct {
		path string
		key  *ecdsa.PrivateKey
	}{{p.caKey, caKey}, {p.serverKey, srvKey}} {
		der, err := x509.MarshalECPrivateKey(k.key)
		if err != nil {
			return nil, err
		}
		files = append(files, struct {
			path, typ string
			der       []byte
		}{k.path, "EC PRIVATE KEY", der})
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return nil, err
		}
	}
	var csv strings.Builder
	uid := 0
	for user, groups := range users {
		tok := make([]byte, 16)
		if _, err := rand.Read(tok); err != nil {
			return nil, err
		}
		id := identity{user: user, groups: groups, token: hex.EncodeToString(tok)}
		p.ids[user] = id
		uid++
		fmt.Fprintf(&csv, "%s,%s,uid-%d,\"%s\"\n", id.token, user, uid, strings.Join(groups, ","))
	}
	if err := os.WriteFile(p.tokens, []byte(csv.String()), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// kubeconfig writes a kubeconfig for user at server to path.
func (p *pki) kubeconfig(path, server, user string) error {
	id, ok := p.ids[user]
	if !ok {
		return fmt.Errorf("no identity %q", user)
	}
	ca, err := os.ReadFile(p.caCert)
	if err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: test
  context:
    cluster: test
    user: %s
current-context: test
`, server, base64.StdEncoding.EncodeToString(ca), user, id.token, user)
	return os.WriteFile(path, []byte(cfg), 0o600)
}

// TestPKI checks that the serving certificate verifies against the CA
// for every address clients use (the host's loopback, the guests'
// forward, the kubernetes Service), and each identity's token line
// names its groups.
func TestPKI(t *testing.T) {
	dir := t.TempDir()
	p, err := newPKI(dir, []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(guestAPIAddr)}, []string{"kubernetes.default.svc"},
		map[string][]string{"admin": {"system:masters"}, "system:node:n1": {"system:nodes"}})
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string) *x509.Certificate {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no PEM", path)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	pool := x509.NewCertPool()
	pool.AddCert(read(p.caCert))
	srv := read(p.serverCert)
	for _, name := range []string{"127.0.0.1", guestAPIAddr, "kubernetes.default.svc"} {
		if _, err := srv.Verify(x509.VerifyOptions{DNSName: name, Roots: pool}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	if _, err := srv.Verify(x509.VerifyOptions{DNSName: "10.0.2.15", Roots: pool}); err == nil {
		t.Error("serving certificate valid for an address it should not name")
	}
	csv, err := os.ReadFile(p.tokens)
	if err != nil {
		t.Fatal(err)
	}
	for user, want := range map[string]string{"admin": `,"system:masters"`, "system:node:n1": `,"system:nodes"`} {
		line := p.ids[user].token + "," + user + ","
		if !strings.Contains(string(csv), line) {
			t.Errorf("no token line for %s in %s", user, csv)
		}
		i := strings.Index(string(csv), line)
		rest, _, _ := strings.Cut(string(csv)[i:], "\n")
		if !strings.HasSuffix(rest, want) {
			t.Errorf("%s: %q, want groups %s", user, rest, want)
		}
	}
	kc := filepath.Join(dir, "kc")
	if err := p.kubeconfig(kc, "https://10.0.2.100:6443", "system:node:n1"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(kc); !strings.Contains(string(b), "token: "+p.ids["system:node:n1"].token) {
		t.Errorf("kubeconfig lacks the node's token:\n%s", b)
	}
}
