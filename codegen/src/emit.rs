//! What a kernel is written with, apart from what it computes: the LLVM
//! context, module and builder ([`Emit`]), the error type, and the LLVM
//! types of rocmc's dtypes. Both the target-neutral lowering
//! ([`crate::function`]) and the targets' dialects ([`crate::backend`])
//! use it; neither depends on the other through it.

use crate::CodegenError;
use inkwell::attributes::Attribute;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::Module;
use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicMetadataValueEnum, BasicValueEnum, FunctionValue, IntValue};
use rocmc_ir::DType;

pub(crate) type R<T> = Result<T, CodegenError>;

pub(crate) fn llvm_err(e: impl std::fmt::Display) -> CodegenError {
    CodegenError::Llvm(e.to_string())
}

/// An LLVM type as the matrix table writes it: `float`, `i32`, `<4 x half>`.
pub(crate) fn llvm_type<'ctx>(cx: &'ctx Context, s: &str) -> R<BasicTypeEnum<'ctx>> {
    let scalar = |t: &str| -> R<BasicTypeEnum<'ctx>> {
        Ok(match t {
            "half" => cx.f16_type().into(),
            "bfloat" => cx.bf16_type().into(),
            "float" => cx.f32_type().into(),
            "i16" => cx.i16_type().into(),
            "i32" => cx.i32_type().into(),
            "i64" => cx.i64_type().into(),
            other => {
                return Err(CodegenError::Llvm(format!(
                    "unknown matrix operand type {other}"
                )))
            }
        })
    };
    match s.strip_prefix('<').and_then(|r| r.strip_suffix('>')) {
        Some(inner) => {
            let (n, t) = inner
                .split_once(" x ")
                .ok_or_else(|| CodegenError::Llvm(format!("bad vector type {s}")))?;
            let n: u32 = n
                .parse()
                .map_err(|_| CodegenError::Llvm(format!("bad vector type {s}")))?;
            Ok(match scalar(t)? {
                BasicTypeEnum::FloatType(f) => f.vec_type(n).into(),
                BasicTypeEnum::IntType(i) => i.vec_type(n).into(),
                _ => unreachable!("scalars only"),
            })
        }
        None => scalar(s),
    }
}

pub(crate) fn ty<'ctx>(cx: &'ctx Context, d: DType) -> BasicTypeEnum<'ctx> {
    match d {
        DType::Bool => cx.bool_type().into(),
        DType::I8 | DType::U8 => cx.i8_type().into(),
        DType::I32 | DType::U32 => cx.i32_type().into(),
        DType::I64 => cx.i64_type().into(),
        DType::F16 => cx.f16_type().into(),
        DType::BF16 => cx.bf16_type().into(),
        DType::F32 => cx.f32_type().into(),
        DType::F64 => cx.f64_type().into(),
        // 8-bit floats are their encoding's bits: no LLVM type holds them
        // on every target, and nothing computes in them.
        DType::F8E4M3FN | DType::F8E5M2 | DType::F8E4M3FNUZ | DType::F8E5M2FNUZ => {
            cx.i8_type().into()
        }
    }
}

pub(crate) fn enum_attr(cx: &Context, name: &str, v: u64) -> Attribute {
    cx.create_enum_attribute(Attribute::get_named_enum_kind_id(name), v)
}

/// The context, module and builder of the function being written.
pub(crate) struct Emit<'a, 'ctx> {
    pub cx: &'ctx Context,
    pub m: &'a Module<'ctx>,
    pub b: &'a Builder<'ctx>,
}

impl<'ctx> Emit<'_, 'ctx> {
    pub(crate) fn i32(&self, v: i64) -> IntValue<'ctx> {
        self.cx.i32_type().const_int(v as u64, true)
    }

    pub(crate) fn intrinsic(
        &self,
        name: &str,
        tys: &[BasicTypeEnum<'ctx>],
    ) -> R<FunctionValue<'ctx>> {
        let i = Intrinsic::find(name)
            .ok_or_else(|| CodegenError::Llvm(format!("no intrinsic {name}")))?;
        i.get_declaration(self.m, tys)
            .ok_or_else(|| CodegenError::Llvm(format!("cannot declare {name}")))
    }

    pub(crate) fn call(
        &self,
        name: &str,
        tys: &[BasicTypeEnum<'ctx>],
        args: &[BasicMetadataValueEnum<'ctx>],
    ) -> R<BasicValueEnum<'ctx>> {
        let f = self.intrinsic(name, tys)?;
        let v = self.b.build_call(f, args, "").map_err(llvm_err)?;
        match v.try_as_basic_value() {
            inkwell::values::ValueKind::Basic(v) => Ok(v),
            _ => Err(CodegenError::Llvm(format!("{name} returns nothing"))),
        }
    }

    /// Calls intrinsic `name`, which takes and returns nothing.
    pub(crate) fn call_void(&self, name: &str) -> R<()> {
        let f = self.intrinsic(name, &[])?;
        self.b.build_call(f, &[], "").map_err(llvm_err)?;
        Ok(())
    }
}
