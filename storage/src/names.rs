//! Where names live on disk: a schema is a folder under the tables' root, a table a folder
//! (its Delta table) in its schema's folder. Folder names spell the SQL name, with every byte
//! outside `[A-Za-z0-9_-]` written as `~XX` (hex), so that any quoted name is a valid, distinct
//! folder name and the folder says which name it holds.

/// The folder name that holds `name`.
///
/// ```
/// use accelsql_storage::names::{folder_name, name_of_folder};
/// assert_eq!(folder_name("cities"), "cities");
/// assert_eq!(folder_name("My Table.v2"), "My~20Table~2Ev2");
/// assert_eq!(name_of_folder("My~20Table~2Ev2").as_deref(), Some("My Table.v2"));
/// ```
pub fn folder_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("~{byte:02X}"));
        }
    }
    out
}

/// The SQL name a folder holds, if the folder is one [`folder_name`] made.
pub fn name_of_folder(folder: &str) -> Option<String> {
    let bytes = folder.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'~' => {
                let hex = folder.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    if out.is_empty() {
        return None;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips_and_hidden_or_relative_folders_cannot_be_made() {
        for name in [
            "t",
            "CITIES",
            "a b",
            "..",
            ".",
            "ä€",
            "x/y",
            "~7E",
            "_delta_log",
            "-",
        ] {
            let folder = folder_name(name);
            assert!(!folder.starts_with('.'), "{folder}");
            assert!(!folder.contains('/'), "{folder}");
            assert_eq!(name_of_folder(&folder).as_deref(), Some(name), "{folder}");
        }
        assert_eq!(name_of_folder(".schema.json"), None);
        assert_eq!(name_of_folder("~zz"), None);
        assert_eq!(name_of_folder(""), None);
    }
}
