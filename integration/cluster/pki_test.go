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
