package config

import (
	"encoding/json"
	"net"
)

// Checks of the values in a prevResult, each as strict as the CNI library's
// decoder or stricter: a value they accept decodes and converts.

func checkString(path string, raw json.RawMessage, _ *warnings) error {
	_, err := decodeString(path, raw)
	return err
}

func decodeString(path string, raw json.RawMessage) (string, error) {
	var s *string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", errField(path, "want a string, got %s", jsonKind(raw))
	}
	if s == nil {
		return "", nil
	}
	if len(*s) > maxResultString {
		return "", errField(path, "%d bytes, at most %d allowed", len(*s), maxResultString)
	}
	return *s, nil
}

func checkStrings(path string, raw json.RawMessage, w *warnings) error {
	var out []string
	return stringList(&out, maxResultEntries)(path, raw, w)
}

func checkInt(path string, raw json.RawMessage, _ *warnings) error {
	var i *int
	if err := json.Unmarshal(raw, &i); err != nil {
		return errField(path, "want an integer, got %s", truncate(string(raw)))
	}
	return nil
}

func checkMAC(path string, raw json.RawMessage, _ *warnings) error {
	s, err := decodeString(path, raw)
	if err != nil || s == "" {
		return err
	}
	if _, err := net.ParseMAC(s); err != nil {
		return errField(path, "%q is not a MAC address", truncate(s))
	}
	return nil
}

// checkCIDR requires an address with prefix length, as types.IPNet reads it.
func checkCIDR(path string, raw json.RawMessage, _ *warnings) error {
	s, err := decodeString(path, raw)
	if err != nil {
		return err
	}
	if _, _, err := net.ParseCIDR(s); err != nil {
		return errField(path, "%q is not an address with prefix length", truncate(s))
	}
	return nil
}

func checkIP(path string, raw json.RawMessage, _ *warnings) error {
	s, err := decodeString(path, raw)
	if err != nil || s == "" {
		return err
	}
	if net.ParseIP(s) == nil {
		return errField(path, "%q is not an IP address", truncate(s))
	}
	return nil
}

func checkIPVersion(path string, raw json.RawMessage, _ *warnings) error {
	s, err := decodeString(path, raw)
	if err != nil || s == "" || s == "4" || s == "6" {
		return err
	}
	return errField(path, "want \"4\" or \"6\", got %q", truncate(s))
}
