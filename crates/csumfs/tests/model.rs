//! Model-based: random sequences of create, mkdir, write, unlink, rmdir,
//! rename and symlink, applied to csumfs and to an in-memory model of the
//! tree, proptest shrinking any failure. After each sequence `e2fsck -fn`
//! calls the image clean and csumfs reads back exactly the model. An
//! operation the writer refuses (`Unsupported`) must leave both unchanged.

mod common;

use common::model::{apply, op, parent_and_name, Model, Node, Op};
use common::tool;
use csumfs::{Options, Volume};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::process::Command;

fn run_sequence(ops: &[Op]) -> Result<(), String> {
    let (Some(mkfs), Some(fsck)) = (tool("mke2fs"), tool("e2fsck")) else { return Ok(()) };
    let image =
        std::env::temp_dir().join(format!("csumfs-model-{}-{:?}.img", std::process::id(), std::thread::current().id()));
    let _ = std::fs::remove_file(&image);
    let out = Command::new(mkfs)
        .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,64bit", "-b", "1024"])
        .arg(&image)
        .arg("8M")
        .output()
        .unwrap();
    assert!(out.status.success());
    let result = (|| {
        let options = Options { write: true, check_updates: true, ..Options::default() };
        let mut v = Volume::open(&image, options).map_err(|e| e.to_string())?;
        let mut model: Model = BTreeMap::from([("/".to_string(), Node::Dir)]);
        for (step, op) in ops.iter().enumerate() {
            apply(&mut v, &mut model, op, step)?;
        }
        v.sync().map_err(|e| e.to_string())?;
        drop(v);
        let out = Command::new(&fsck).arg("-fn").arg(&image).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.code() != Some(0) || text.contains("? no") {
            return Err(format!("e2fsck -fn:\n{text}"));
        }
        let v = Volume::open(&image, Options::default()).map_err(|e| e.to_string())?;
        for (path, node) in &model {
            let inode = v.resolve(path).map_err(|e| format!("{path}: {e}"))?;
            let ok = match node {
                Node::Dir => inode.is_dir(),
                Node::File(content) => v.read_all(&inode).map_err(|e| e.to_string())? == *content,
                Node::Link(target) => v.read_link(&inode).map_err(|e| e.to_string())? == *target,
            };
            if !ok {
                return Err(format!("{path}: differs from the model"));
            }
        }
        let names = |p: &str| -> Result<usize, String> {
            let dir = v.resolve(p).map_err(|e| e.to_string())?;
            Ok(v.read_dir(&dir).map_err(|e| e.to_string())?.len() - 2)
        };
        for (path, node) in &model {
            if *node == Node::Dir {
                let want = model.keys().filter(|k| k.len() > path.len() && parent_and_name(k).0 == path).count()
                    + usize::from(path == "/"); // lost+found
                if names(path)? != want {
                    return Err(format!("{path}: {} entries, the model has {want}", names(path)?));
                }
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&image);
    result
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_operation_sequences_match_the_model_and_e2fsck(ops in proptest::collection::vec(op(), 1..80)) {
        run_sequence(&ops).map_err(TestCaseError::fail)?;
    }
}
