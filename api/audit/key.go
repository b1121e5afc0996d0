package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// Audit keys are Ed25519 keys in the PEM files OpenSSL also reads and
// writes:
//
//   - the signing (private) key: a PEM block "PRIVATE KEY" holding PKCS #8,
//     as `openssl genpkey -algorithm ed25519 -out audit.key` or
//     `reviewledger audit keygen` write it; only serve reads it
//     (REVIEWLEDGER_AUDIT_SIGNING_KEY);
//   - the public key: a PEM block "PUBLIC KEY" holding PKIX
//     (SubjectPublicKeyInfo), as `openssl pkey -in audit.key -pubout`
//     writes it; auditors check checkpoints with it
//     (`audit verify --public-key`).
//
// A key's ID, named in every checkpoint it signs, is the first 16 hex
// digits of the SHA-256 of its public key's PKIX encoding.

// ErrBadKey is wrapped by errors reading a key file.
var ErrBadKey = errors.New("not an Ed25519 key file")

// KeyID returns the ID of a public key.
func KeyID(pub ed25519.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil { // only for keys of the wrong length
		return ""
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:8])
}

// LoadPrivateKey reads a signing key file. Errors name the file.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	der, err := readPEM(path, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("%s: PKCS #8: %v: %w", path, err, ErrBadKey)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not an Ed25519 key: %w", path, k, ErrBadKey)
	}
	return key, nil
}

// LoadPublicKey reads a public key file. Errors name the file.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	der, err := readPEM(path, "PUBLIC KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("%s: PKIX: %v: %w", path, err, ErrBadKey)
	}
	key, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not an Ed25519 key: %w", path, k, ErrBadKey)
	}
	return key, nil
}

func readPEM(path, blockType string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != blockType {
		return nil, fmt.Errorf("%s: want a PEM %q block: %w", path, blockType, ErrBadKey)
	}
	return block.Bytes, nil
}

// WriteKeyPair generates a key and writes the signing key to path (mode
// 0600) and its public key to path + ".pub" (0644). It refuses to replace
// either file. It returns the key's ID.
func WriteKeyPair(path string) (string, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	if err := writeNew(path+".pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return "", err
	}
	if err := writeNew(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), 0o600); err != nil {
		_ = os.Remove(path + ".pub")
		return "", err
	}
	return KeyID(pub), nil
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
