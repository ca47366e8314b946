target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare float @helper_twice(float)

define void @twice(float addrspace(1)* %x) {
entry:
  %v = load float, float addrspace(1)* %x
  %r = call float @helper_twice(float %v)
  store float %r, float addrspace(1)* %x
  ret void
}

!nvvm.annotations = !{!0}
!0 = !{void (float addrspace(1)*)* @twice, !"kernel", i32 1}
!nvvmir.version = !{!1}
!1 = !{i32 2, i32 0}
