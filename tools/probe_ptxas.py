"""Print NVRTC's raw ptxas report for two kernels compiled one after another (diagnosing lost fields)."""

from cuda_agent.agent.device_source import device_source
from cuda_agent.sandbox.compile import compile_kernel

source = device_source(open("examples/elementwise.cu").read())
for name in ("relu", "saxpy", "relu"):
    result = compile_kernel(source, name)
    print("=====", name, result.kernel.resources if result.kernel else None)
    print(repr(result.log[-1500:]))
