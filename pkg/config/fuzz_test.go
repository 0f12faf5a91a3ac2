package config

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// FuzzParse checks that any stdin is either one CNI error (code 1, 6 or 7,
// with a message) or a conf whose fields pass validation and whose
// prevResult converts to every supported version. The seed corpus under
// testdata/fuzz/FuzzParse holds prevResults at every version with nulls and
// out-of-range indexes, case-variant keys and wrong types.
func FuzzParse(f *testing.F) {
	f.Add([]byte(confAt("1.0.0", "")))
	f.Add([]byte(prevAt("0.4.0", `{"interfaces":[null],"ips":[{"interface":0,"address":"10.0.0.2/24"}]}`)))
	f.Fuzz(func(t *testing.T, stdin []byte) {
		checkFuzzWithoutPrev(t, stdin)
		conf, warnings, err := Parse(stdin)
		if len(warnings) > maxWarnings+1 {
			t.Fatalf("%d warnings", len(warnings))
		}
		if err != nil {
			checkFuzzError(t, err, conf, types.ErrIncompatibleCNIVersion, types.ErrDecodingFailure, types.ErrInvalidNetworkConfig)
			return
		}
		checkFuzzConf(t, conf)
	})
}

// checkFuzzWithoutPrev checks that the DEL/GC/STATUS parse never fails on
// prevResult and never returns one.
func checkFuzzWithoutPrev(t *testing.T, stdin []byte) {
	t.Helper()
	conf, _, err := ParseWithoutPrevResult(stdin)
	if err != nil {
		checkFuzzError(t, err, conf, types.ErrIncompatibleCNIVersion, types.ErrInvalidNetworkConfig)
		return
	}
	if conf.PrevResult != nil || conf.RawPrevResult != nil {
		t.Fatal("ParseWithoutPrevResult returned a prevResult")
	}
	if err := conf.validate(); err != nil {
		t.Fatalf("parsed conf fails validation: %v", err)
	}
}

func checkFuzzError(t *testing.T, err error, conf *NetConf, codes ...uint) {
	t.Helper()
	var te *types.Error
	if !errors.As(err, &te) || te.Msg == "" || len(te.Msg)+len(te.Details) > 1024 {
		t.Fatalf("not a bounded CNI error with a message: %#v", err)
	}
	for _, c := range codes {
		if te.Code == c {
			if conf != nil {
				t.Fatalf("a conf returned with error %v", err)
			}
			return
		}
	}
	t.Fatalf("code %d not one of %v: %v", te.Code, codes, err)
}

func checkFuzzConf(t *testing.T, conf *NetConf) {
	t.Helper()
	if err := conf.validate(); err != nil {
		t.Fatalf("parsed conf fails validation: %v", err)
	}
	if id := conf.RequestedDeviceID(); id != "" && !ValidDeviceID(id) {
		t.Fatalf("device ID %q passed", id)
	}
	if err := ValidIfName(conf.PodIfName(999)); err != nil {
		t.Fatalf("ifName: %v", err)
	}
	if conf.HasIPAM() && !pluginNameRE.MatchString(conf.IPAM.Type) {
		t.Fatalf("ipam.type %q passed", conf.IPAM.Type)
	}
	if _, err := conf.IPAMStdin(); err != nil {
		t.Fatalf("IPAMStdin: %v", err)
	}
	for _, a := range conf.ValidAttachments() {
		if err := ValidIfName(a.IfName); err != nil || a.ContainerID == "" {
			t.Fatalf("attachment %+v passed", a)
		}
	}
	_, _ = conf.SMCRRequested()
	if conf.PrevResult == nil {
		return
	}
	if err := checkResult(conf.PrevResult); err != nil {
		t.Fatalf("prevResult passed Parse but not checkResult: %v", err)
	}
	assertConverts(t, conf)
}

// FuzzParseArgs checks that any CNI_ARGS is either a code-7 error or a
// pod identity whose every value matches its rule.
func FuzzParseArgs(f *testing.F) {
	f.Add("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=1f2e-33")
	f.Add("K8S_POD_NAME=a=b")
	f.Fuzz(func(t *testing.T, args string) {
		pod, err := ParseArgs(args)
		if err != nil {
			checkFuzzError(t, err, nil, types.ErrInvalidNetworkConfig)
			if pod != (Pod{}) {
				t.Fatalf("pod %+v returned with error", pod)
			}
			return
		}
		if (pod.Namespace == "") != (pod.Name == "") ||
			(pod.Name != "" && (!dnsRE.MatchString(pod.Name) || !dnsRE.MatchString(pod.Namespace))) ||
			(pod.UID != "" && !uidRE.MatchString(pod.UID)) ||
			(pod.InfraContainerID != "" && !networkNameRE.MatchString(pod.InfraContainerID)) {
			t.Fatalf("invalid pod passed: %+v", pod)
		}
		if pod.Name != "" && !strings.Contains(args, "K8S_POD_NAME="+pod.Name) {
			t.Fatalf("pod name %q not from %q", pod.Name, args)
		}
	})
}

// FuzzAnnotations checks that the pod author's SMC-R annotation value (and
// the whole annotations object) never fails in a way other than code 7 for a
// non-string map, and only "true"/"false" in ASCII letters of any case count.
func FuzzAnnotations(f *testing.F) {
	f.Add("true", "")
	f.Add("tRuE", `{"a":"b"}`)
	f.Add("fal\u017fe", `{"network.alibabacloud.com/erdma-smcr":1}`)
	f.Fuzz(func(t *testing.T, value, raw string) {
		annotations := raw
		if annotations == "" {
			b, _ := json.Marshal(map[string]string{AnnotationSMCR: value})
			annotations = string(b)
		}
		conf, _, err := Parse([]byte(confAt("1.0.0", `,"runtimeConfig":{"`+AnnotationsCapability+`":`+annotations+`}`)))
		if err != nil {
			checkFuzzError(t, err, conf, types.ErrInvalidNetworkConfig)
			return
		}
		on, warning := conf.SMCRRequested()
		v, ok := conf.RuntimeConfig.PodAnnotations[AnnotationSMCR]
		switch {
		case on != (ok && asciiFold(v, "true")):
			t.Fatalf("value %q gave %v", v, on)
		case (warning != "") != (ok && !asciiFold(v, "true") && !asciiFold(v, "false")):
			t.Fatalf("value %q gave warning %q", v, warning)
		case len(warning) > 200:
			t.Fatalf("warning of %d bytes", len(warning))
		}
	})
}

// asciiFold compares s with the lower-case ASCII word w, ignoring the case
// of ASCII letters only.
func asciiFold(s, w string) bool {
	if len(s) != len(w) {
		return false
	}
	for i := range len(s) {
		if s[i]|0x20 != w[i] {
			return false
		}
	}
	return true
}
