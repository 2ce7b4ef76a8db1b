//! The model the model-based and power-cut tests share: random operations
//! (create, mkdir, write, truncate, fallocate, punch hole, zero range,
//! unlink, rmdir, rename, symlink) applied to a volume and to an in-memory
//! tree, which must then agree.

use csumfs::{Error, NewInode, RenameMode, Volume};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Dir,
    File(Vec<u8>),
    Link(Vec<u8>),
}

#[derive(Clone, Debug)]
pub enum Op {
    Create {
        dir: usize,
        name: u8,
        len: usize,
    },
    Mkdir {
        dir: usize,
        name: u8,
    },
    Write {
        file: usize,
        offset: usize,
        len: usize,
    },
    Unlink {
        file: usize,
    },
    Rmdir {
        dir: usize,
    },
    Rename {
        from: usize,
        dir: usize,
        name: u8,
    },
    Symlink {
        dir: usize,
        name: u8,
        len: usize,
    },
    Truncate {
        file: usize,
        size: usize,
    },
    /// `fallocate(2)` with `mode` 0 or `FALLOC_FL_KEEP_SIZE`.
    Fallocate {
        file: usize,
        offset: usize,
        len: usize,
        keep_size: bool,
    },
    PunchHole {
        file: usize,
        offset: usize,
        len: usize,
    },
    ZeroRange {
        file: usize,
        offset: usize,
        len: usize,
        keep_size: bool,
    },
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<usize>(), 0u8..24, 0usize..9000).prop_map(|(dir, name, len)| Op::Create { dir, name, len }),
        (any::<usize>(), 0u8..24).prop_map(|(dir, name)| Op::Mkdir { dir, name }),
        (any::<usize>(), 0usize..40_000, 1usize..9000).prop_map(|(file, offset, len)| Op::Write { file, offset, len }),
        any::<usize>().prop_map(|file| Op::Unlink { file }),
        any::<usize>().prop_map(|dir| Op::Rmdir { dir }),
        (any::<usize>(), any::<usize>(), 0u8..24).prop_map(|(from, dir, name)| Op::Rename { from, dir, name }),
        (any::<usize>(), 0u8..24, 1usize..200).prop_map(|(dir, name, len)| Op::Symlink { dir, name, len }),
        (any::<usize>(), 0usize..45_000).prop_map(|(file, size)| Op::Truncate { file, size }),
        (any::<usize>(), 0usize..40_000, 1usize..20_000, any::<bool>())
            .prop_map(|(file, offset, len, keep_size)| Op::Fallocate { file, offset, len, keep_size }),
        (any::<usize>(), 0usize..40_000, 1usize..20_000).prop_map(|(file, offset, len)| Op::PunchHole {
            file,
            offset,
            len
        }),
        (any::<usize>(), 0usize..40_000, 1usize..20_000, any::<bool>())
            .prop_map(|(file, offset, len, keep_size)| Op::ZeroRange { file, offset, len, keep_size }),
    ]
}

pub type Model = BTreeMap<String, Node>;

pub fn pick(model: &Model, want: impl Fn(&Node) -> bool, i: usize) -> Option<String> {
    let all: Vec<&String> = model.iter().filter(|(_, n)| want(n)).map(|(p, _)| p).collect();
    (!all.is_empty()).then(|| all[i % all.len()].clone())
}

pub fn parent_and_name(path: &str) -> (&str, &str) {
    let (parent, name) = path.rsplit_once('/').unwrap();
    (if parent.is_empty() { "/" } else { parent }, name)
}

pub fn child(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

pub fn bytes(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(131).wrapping_add(seed * 7) % 251) as u8).collect()
}

/// Applies `op` to the volume and the model; `false` when the writer
/// refused it (then neither may have changed).
pub fn apply(v: &mut Volume, model: &mut Model, op: &Op, step: usize) -> Result<(), String> {
    let file_mode = NewInode { mode: 0o100_644, uid: 1, gid: 2 };
    let dir_mode = NewInode { mode: 0o755, uid: 0, gid: 0 };
    let ino = |v: &Volume, p: &str| v.resolve(p).map(|i| i.ino).map_err(|e| format!("{p}: {e}"));
    let result: Result<(), Error> = match op {
        Op::Create { dir, name, len } => {
            let Some(d) = pick(model, |n| *n == Node::Dir, *dir) else { return Ok(()) };
            let path = child(&d, &format!("f{name}"));
            let expect_exists = model.contains_key(&path);
            let data = bytes(step, *len);
            match v.create(ino(v, &d)?, format!("f{name}").as_bytes(), file_mode) {
                Err(e) if expect_exists && e.errno() == 17 => return Ok(()),
                Err(e) => Err(e),
                Ok(_) if expect_exists => return Err(format!("{path}: created over an existing name")),
                Ok(f) => {
                    model.insert(path.clone(), Node::File(Vec::new()));
                    if !data.is_empty() {
                        v.write(f.ino, 0, &data).map_err(|e| format!("{path}: {e}"))?;
                    }
                    model.insert(path, Node::File(data));
                    Ok(())
                }
            }
        }
        Op::Mkdir { dir, name } => {
            let Some(d) = pick(model, |n| *n == Node::Dir, *dir) else { return Ok(()) };
            let path = child(&d, &format!("d{name}"));
            match v.mkdir(ino(v, &d)?, format!("d{name}").as_bytes(), dir_mode) {
                Err(e) if model.contains_key(&path) && e.errno() == 17 => return Ok(()),
                Err(e) => Err(e),
                Ok(_) => {
                    model.insert(path, Node::Dir);
                    Ok(())
                }
            }
        }
        Op::Write { file, offset, len } => {
            let Some(f) = pick(model, |n| matches!(n, Node::File(_)), *file) else { return Ok(()) };
            let data = bytes(step, *len);
            match v.write(ino(v, &f)?, *offset as u64, &data) {
                Err(e) => Err(e),
                Ok(_) => {
                    let Some(Node::File(content)) = model.get_mut(&f) else { unreachable!() };
                    if content.len() < offset + len {
                        content.resize(offset + len, 0);
                    }
                    content[*offset..offset + len].copy_from_slice(&data);
                    Ok(())
                }
            }
        }
        Op::Unlink { file } => {
            let Some(f) = pick(model, |n| !matches!(n, Node::Dir), *file) else { return Ok(()) };
            let (d, name) = parent_and_name(&f);
            v.unlink(ino(v, d)?, name.as_bytes()).map(|()| {
                model.remove(&f);
            })
        }
        Op::Rmdir { dir } => {
            let Some(d) = pick(model, |n| *n == Node::Dir, *dir).filter(|d| d != "/") else { return Ok(()) };
            let empty = !model.keys().any(|k| k.starts_with(&format!("{d}/")));
            let (p, name) = parent_and_name(&d);
            match v.rmdir(ino(v, p)?, name.as_bytes()) {
                Err(e) if !empty && e.errno() == 39 => return Ok(()),
                Err(e) => Err(e),
                Ok(()) if !empty => return Err(format!("{d}: removed while not empty")),
                Ok(()) => {
                    model.remove(&d);
                    Ok(())
                }
            }
        }
        Op::Rename { from, dir, name } => {
            let Some(src) = pick(model, |_| true, *from).filter(|s| s != "/") else { return Ok(()) };
            let Some(d) = pick(model, |n| *n == Node::Dir, *dir) else { return Ok(()) };
            let is_dir = model[&src] == Node::Dir;
            let new_name = format!("{}{name}", if is_dir { "d" } else { "f" });
            let dst = child(&d, &new_name);
            let under_itself = is_dir && (d == src || d.starts_with(&format!("{src}/")));
            let (sp, sn) = parent_and_name(&src);
            let outcome = v.rename(ino(v, sp)?, sn.as_bytes(), ino(v, &d)?, new_name.as_bytes(), RenameMode::Replace);
            let target = model.get(&dst).cloned();
            let target_busy = target == Some(Node::Dir) && model.keys().any(|k| k.starts_with(&format!("{dst}/")));
            match outcome {
                Err(e) if under_itself && e.errno() == 22 => return Ok(()),
                Err(e) if target_busy && e.errno() == 39 => return Ok(()),
                Err(e) if target.is_some() && (target == Some(Node::Dir)) != is_dir && matches!(e.errno(), 20 | 21) => {
                    return Ok(())
                }
                Err(e) => Err(e),
                Ok(()) if src == dst => Ok(()),
                Ok(()) => {
                    // Everything at or below src moves to dst.
                    let moved: Vec<(String, Node)> = model
                        .iter()
                        .filter(|(k, _)| *k == &src || k.starts_with(&format!("{src}/")))
                        .map(|(k, n)| (k.clone(), n.clone()))
                        .collect();
                    model.remove(&dst);
                    for (k, n) in moved {
                        model.remove(&k);
                        model.insert(format!("{dst}{}", &k[src.len()..]), n);
                    }
                    Ok(())
                }
            }
        }
        Op::Symlink { dir, name, len } => {
            let Some(d) = pick(model, |n| *n == Node::Dir, *dir) else { return Ok(()) };
            let path = child(&d, &format!("l{name}"));
            let target: Vec<u8> = (0..*len).map(|i| b'a' + (i % 26) as u8).collect();
            match v.symlink(ino(v, &d)?, format!("l{name}").as_bytes(), &target, 0, 0) {
                Err(e) if model.contains_key(&path) && e.errno() == 17 => return Ok(()),
                Err(e) => Err(e),
                Ok(_) => {
                    model.insert(path, Node::Link(target));
                    Ok(())
                }
            }
        }
        Op::Truncate { file, size } => {
            let Some(f) = pick(model, |n| matches!(n, Node::File(_)), *file) else { return Ok(()) };
            v.truncate(ino(v, &f)?, *size as u64).map(|_| file_content(model, &f).resize(*size, 0))
        }
        Op::Fallocate { file, offset, len, keep_size } => {
            let Some(f) = pick(model, |n| matches!(n, Node::File(_)), *file) else { return Ok(()) };
            v.fallocate(ino(v, &f)?, *offset as u64, *len as u64, *keep_size).map(|_| {
                let content = file_content(model, &f);
                if !keep_size && content.len() < offset + len {
                    content.resize(offset + len, 0);
                }
            })
        }
        Op::PunchHole { file, offset, len } => {
            let Some(f) = pick(model, |n| matches!(n, Node::File(_)), *file) else { return Ok(()) };
            v.punch_hole(ino(v, &f)?, *offset as u64, *len as u64).map(|_| {
                let content = file_content(model, &f);
                let end = (offset + len).min(content.len());
                if *offset < end {
                    content[*offset..end].fill(0);
                }
            })
        }
        Op::ZeroRange { file, offset, len, keep_size } => {
            let Some(f) = pick(model, |n| matches!(n, Node::File(_)), *file) else { return Ok(()) };
            v.zero_range(ino(v, &f)?, *offset as u64, *len as u64, *keep_size).map(|_| {
                let content = file_content(model, &f);
                let end = (offset + len).min(content.len());
                if *offset < end {
                    content[*offset..end].fill(0);
                }
                if !keep_size && content.len() < offset + len {
                    content.resize(offset + len, 0);
                }
            })
        }
    };
    match result {
        Ok(()) | Err(Error::Unsupported { .. }) => Ok(()),
        Err(e) => Err(format!("{op:?}: {e}")),
    }
}

fn file_content<'m>(model: &'m mut Model, path: &str) -> &'m mut Vec<u8> {
    match model.get_mut(path) {
        Some(Node::File(content)) => content,
        _ => unreachable!("{path} was picked as a file"),
    }
}
