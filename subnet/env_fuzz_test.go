package subnet

import (
	"bytes"
	"testing"
)

func FuzzParseEnv(f *testing.F) {
	for _, seed := range []string{
		"",
		"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
		"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n" +
			"FLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\n" +
			"FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
		"FLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\nFLANNEL_MTU=1400\nFLANNEL_IPMASQ=false\n",
		"# comment\r\n\r\n  FLANNEL_MTU = 1450 \r\n\tFLANNEL_IPMASQ=\tTRUE\t\r\n",
		"FLANNEL_MTU=1500\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=1\nFLANNEL_IPMASQ=0",
		"FLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_FUTURE=a=b\nOTHER=\n=\n",
		"FLANNEL_NETWORK=::ffff:10.0.0.0/104\n",
		"FLANNEL_IPV6_SUBNET=::ffff:10.244.1.1/120\n",
		"FLANNEL_MTU=0065535\n",
		"FLANNEL_SUBNET=10.1.1.1/33\n",
		"FLANNEL_MTU=65536\n",
		"FLANNEL_IPMASQ=yes\n",
		"garbage\n",
		"\x00\xff\xfe=\n\n\n#",
		"FLANNEL_NETWORK=10.244.0.0/16\u00a0\n\u0085FLANNEL_MTU=1\u2028\n",
	} {
		f.Add([]byte(seed))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParseEnv(data)
		if err != nil {
			return
		}
		out := e.Marshal()
		e2, err := ParseEnv(out)
		if err != nil {
			t.Fatalf("ParseEnv(%q) = %+v, but ParseEnv of its Marshal %q fails: %v", data, e, out, err)
		}
		if e2 != e {
			t.Fatalf("round trip of %q: ParseEnv(%q) = %+v, want %+v", data, out, e2, e)
		}
		if out2 := e2.Marshal(); !bytes.Equal(out2, out) {
			t.Fatalf("Marshal not stable: %q then %q", out, out2)
		}
		if err := e.validate(); err != nil {
			t.Fatalf("ParseEnv(%q) = %+v, which WriteEnv would refuse: %v", data, e, err)
		}
	})
}
