; Conversions LLVM's x86-64 backend calls as library functions, defined in
; every CPU shared object (hidden) so that it needs nothing from the
; process but libm. f32 <-> f16 are F16C instructions on x86-64-v3.
; Narrowing from f64 rounds to odd in f32 first, which makes the second
; rounding (to the nearest even f16 or bf16) exact: f32 keeps more than
; twice their precision plus two bits.

define hidden bfloat @__truncsfbf2(float %x) {
  %b = bitcast float %x to i32
  %abs = and i32 %b, 2147483647
  %nan = icmp ugt i32 %abs, 2139095040
  %hi = lshr i32 %b, 16
  %odd = and i32 %hi, 1
  %bias = add i32 %odd, 32767
  %r = add i32 %b, %bias
  %rh = lshr i32 %r, 16
  %quiet = or i32 %hi, 64
  %sel = select i1 %nan, i32 %quiet, i32 %rh
  %t = trunc i32 %sel to i16
  %f = bitcast i16 %t to bfloat
  ret bfloat %f
}

define hidden float @rocmc.round_to_odd_f32(double %x) {
  %t = fptrunc double %x to float
  %e = fpext float %t to double
  %exact = fcmp oeq double %e, %x
  %nan = fcmp uno double %x, %x
  %keep = or i1 %exact, %nan
  %tb = bitcast float %t to i32
  %ax = call double @llvm.fabs.f64(double %x)
  %ae = call double @llvm.fabs.f64(double %e)
  %away = fcmp ogt double %ae, %ax
  %dec = sub i32 %tb, 1
  %toward = select i1 %away, i32 %dec, i32 %tb
  %odd = or i32 %toward, 1
  %rb = select i1 %keep, i32 %tb, i32 %odd
  %r = bitcast i32 %rb to float
  ret float %r
}

define hidden bfloat @__truncdfbf2(double %x) {
  %f = call float @rocmc.round_to_odd_f32(double %x)
  %r = call bfloat @__truncsfbf2(float %f)
  ret bfloat %r
}

define hidden half @__truncdfhf2(double %x) {
  %f = call float @rocmc.round_to_odd_f32(double %x)
  %r = fptrunc float %f to half
  ret half %r
}

define hidden half @__truncsfhf2(float %x) {
  %r = fptrunc float %x to half
  ret half %r
}

define hidden float @__extendhfsf2(half %x) {
  %r = fpext half %x to float
  ret float %r
}

define hidden float @__extendbfsf2(bfloat %x) {
  %b = bitcast bfloat %x to i16
  %w = zext i16 %b to i32
  %s = shl i32 %w, 16
  %r = bitcast i32 %s to float
  ret float %r
}

declare double @llvm.fabs.f64(double)
