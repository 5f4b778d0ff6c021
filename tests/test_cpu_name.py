"""decoding.paths.cpu_name: what measurements and built kernels are kept under tells CPU generations apart."""

from decoding.paths import cpu_name, describe_cpu

AVX2 = "processor\t: 0\nmodel name\t: AMD EPYC\ncpu family\t: 23\nmodel\t\t: 49\nflags\t\t: fpu sse2 avx fma avx2\n"
AVX512 = "processor\t: 0\nmodel name\t: AMD EPYC\ncpu family\t: 26\nmodel\t\t: 2\nflags\t\t: fpu avx avx2 avx512f avx512bw\n"


def test_same_model_name_other_generation_is_another_cpu():
    assert describe_cpu(AVX2) != describe_cpu(AVX512)
    assert describe_cpu(AVX2) == "AMD EPYC (family 23 model 49, avx2)"
    assert describe_cpu(AVX512) == "AMD EPYC (family 26 model 2, avx512)"


def test_first_processor_only_and_missing_fields():
    two = AVX512 + "\n" + AVX2.replace("processor\t: 0", "processor\t: 1")
    assert describe_cpu(two) == describe_cpu(AVX512)
    assert describe_cpu("model name : Some ARM core\nFeatures : fp asimd\n") == "Some ARM core"
    assert describe_cpu("processor : 0\nflags : avx2\n") == ""


def test_this_machine_has_a_name():
    assert cpu_name().strip()
