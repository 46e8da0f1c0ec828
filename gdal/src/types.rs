//! warpline's own [`DataType`] and [`Pixel`], so that no `gdal` crate type
//! shows in warpline's public API (an embedder is not pinned to one
//! version of the `gdal` crate).

use std::ffi::CString;

use gdal_sys as sys;

/// A band's data type, by GDAL's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum DataType {
    Byte,
    Int8,
    UInt16,
    Int16,
    UInt32,
    Int32,
    UInt64,
    Int64,
    Float32,
    Float64,
    CInt16,
    CInt32,
    CFloat32,
    CFloat64,
    /// A type this version of warpline does not name (GDAL's number).
    Other(u32),
}

const NAMED: &[(DataType, &str)] = &[
    (DataType::Byte, "Byte"),
    (DataType::Int8, "Int8"),
    (DataType::UInt16, "UInt16"),
    (DataType::Int16, "Int16"),
    (DataType::UInt32, "UInt32"),
    (DataType::Int32, "Int32"),
    (DataType::UInt64, "UInt64"),
    (DataType::Int64, "Int64"),
    (DataType::Float32, "Float32"),
    (DataType::Float64, "Float64"),
    (DataType::CInt16, "CInt16"),
    (DataType::CInt32, "CInt32"),
    (DataType::CFloat32, "CFloat32"),
    (DataType::CFloat64, "CFloat64"),
];

impl DataType {
    /// GDAL's name for it (`Byte`, `UInt16`, `Float32`, ...).
    pub fn name(self) -> String {
        match NAMED.iter().find(|(t, _)| *t == self) {
            Some((_, n)) => (*n).to_owned(),
            None => format!("type {}", self.to_gdal()),
        }
    }

    /// The type GDAL (this process's version) knows by `name`, any case.
    pub fn from_name(name: &str) -> Option<DataType> {
        let c = CString::new(name).ok()?;
        // SAFETY: `c` is a valid C string for the call's duration.
        let t = unsafe { sys::GDALGetDataTypeByName(c.as_ptr()) };
        (t != sys::GDALDataType::GDT_Unknown).then(|| DataType::of_gdal(t))
    }

    /// Bytes per value.
    pub fn size_bytes(self) -> u64 {
        u64::from(crate::dtype_size(self.to_gdal()))
    }

    /// From GDAL's number for a type.
    pub(crate) fn of_gdal(t: sys::GDALDataType::Type) -> DataType {
        // GDAL's own name for its number: the numbers moved (Int8 came in
        // 3.7), the names did not.
        // SAFETY: returns a static string, or NULL for an unknown number.
        let name = unsafe { sys::GDALGetDataTypeName(t) };
        if name.is_null() {
            return DataType::Other(t);
        }
        // SAFETY: a NUL-terminated static string.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
        NAMED
            .iter()
            .find(|(_, n)| *n == name)
            .map_or(DataType::Other(t), |(d, _)| *d)
    }

    /// GDAL's number for it in this process's GDAL.
    pub(crate) fn to_gdal(self) -> sys::GDALDataType::Type {
        if let DataType::Other(t) = self {
            return t;
        }
        let name = NAMED
            .iter()
            .find(|(t, _)| *t == self)
            .map_or("", |(_, n)| n);
        let c = CString::new(name).unwrap_or_default();
        // SAFETY: `c` is a valid C string for the call's duration.
        unsafe { sys::GDALGetDataTypeByName(c.as_ptr()) }
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A pixel type GDAL reads and writes: `u8`, `u16`, `i16`, `u32`, `i32`,
/// `u64`, `i64`, `f32`, `f64`.
pub trait Pixel: sealed::Sealed + Copy + Default + Send + 'static {
    /// Its GDAL data type.
    const TYPE: DataType;
}

macro_rules! pixel {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Pixel for $t {
            const TYPE: DataType = DataType::$d;
        }
    )*};
}

pixel!(u8 => Byte, u16 => UInt16, i16 => Int16, u32 => UInt32, i32 => Int32,
       u64 => UInt64, i64 => Int64, f32 => Float32, f64 => Float64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sizes_round_trip_through_gdal() {
        for (t, n) in [
            (DataType::Byte, "Byte"),
            (DataType::UInt16, "UInt16"),
            (DataType::Float64, "Float64"),
        ] {
            assert_eq!(DataType::from_name(n), Some(t));
            assert_eq!(DataType::from_name(&n.to_ascii_lowercase()), Some(t));
            assert_eq!(DataType::of_gdal(t.to_gdal()), t);
        }
        assert_eq!(DataType::Float32.size_bytes(), 4);
        assert_eq!(DataType::from_name("Float128"), None);
        assert_eq!(f64::TYPE, DataType::Float64);
    }
}
