package numeric

import "testing"

type celsius float32

type count int64

func TestNameOf(t *testing.T) {
	got := []string{NameOf[float32](), NameOf[float64](), NameOf[int32](), NameOf[int64](), NameOf[celsius](), NameOf[count](), NameOf[Float16](), NameOf[BFloat16]()}
	want := []string{"float32", "float64", "int32", "int64", "float32", "int64", "float16", "bfloat16"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("type %d: NameOf is %q, want %q", i, got[i], want[i])
		}
	}
}
