//! Groups feeds (`/xmlgroups`): which users and groups each group holds, so that the appliance
//! resolves a user's groups without asking the directory at query time.

use serde::Deserialize;

use crate::acl::{parse_principal_type, Dialect, Principal, PrincipalInput, Scope};
use crate::error::{Error, Result};
use crate::jsonl::parse_object;

/// One group and its members: a `<membership>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    pub group: Principal,
    pub members: Vec<Principal>,
}

/// The fields of a membership (a groups JSON Lines line's, an Arrow column's), for naming them
/// in errors.
pub const FIELDS: &[&str] = &[
    "group",
    "namespace",
    "case_sensitive",
    "principal_type",
    "members",
];

/// A membership as given (a JSON Lines line, a row of Arrow data), before its values are
/// checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MembershipInput<'a> {
    pub group: String,
    pub namespace: Option<String>,
    pub case_sensitive: Option<bool>,
    pub principal_type: Option<String>,
    #[serde(default, borrow)]
    pub members: Vec<PrincipalInput<'a>>,
}

/// Parses one line (not blank) of a groups JSON Lines input; `index` names it in errors.
pub fn parse_line(index: usize, line: &[u8]) -> Result<Membership> {
    parse_object::<MembershipInput<'_>>(index, line, FIELDS)?.into_membership(index)
}

impl MembershipInput<'_> {
    /// Parses the enumerations (the values are checked with the membership, see
    /// `Membership::encode_into`); `index` names it in errors.
    pub fn into_membership(self, index: usize) -> Result<Membership> {
        let bad = |field: &'static str| move |m: String| Error::record(index, Some(field), m);
        let unqualified = self
            .principal_type
            .as_deref()
            .map(parse_principal_type)
            .transpose()
            .map_err(bad("principal_type"))?
            .unwrap_or(false);
        let members = self
            .members
            .into_iter()
            .enumerate()
            .map(|(i, m)| m.into_principal(&format!("members[{i}]"), Dialect::Groups))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(bad("members"))?;
        Ok(Membership {
            group: Principal {
                name: self.group,
                scope: Scope::Group,
                access: None,
                namespace: self.namespace,
                case_sensitive: self.case_sensitive,
                unqualified,
            },
            members,
        })
    }
}

impl Membership {
    /// Checks the membership and appends its XML form to `out`.
    pub fn encode_into(&self, index: usize, out: &mut Vec<u8>) -> Result<()> {
        self.group
            .check()
            .map_err(|m| Error::record(index, Some("group"), m))?;
        if self.members.is_empty() {
            // Google's groups DTD: `members (principal+)`; the protocol has no empty group.
            return Err(Error::record(
                index,
                Some("members"),
                "a group needs at least one member (the groups DTD has no empty group): leave \
                 the group out instead, and a full groups feed drops it",
            ));
        }
        for (i, member) in self.members.iter().enumerate() {
            member
                .check()
                .map_err(|m| format!("members[{i}]: {m}"))
                .map_err(|m| Error::record(index, Some("members"), m))?;
        }
        out.extend_from_slice(b"<membership>\n");
        self.group.write(out, Dialect::Groups);
        out.extend_from_slice(b"<members>\n");
        for member in &self.members {
            member.write(out, Dialect::Groups);
        }
        out.extend_from_slice(b"</members>\n</membership>\n");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(line: &str) -> Result<String> {
        let mut out = Vec::new();
        parse_line(0, line.as_bytes())?.encode_into(0, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn a_group_with_members_in_the_groups_dialect() {
        let xml = encode(
            r#"{"group": "eng", "namespace": "Default", "members": [
                {"name": "CORP\\alice", "scope": "user", "case_sensitive": false},
                {"name": "qa", "scope": "group"}]}"#,
        )
        .unwrap();
        assert_eq!(
            xml,
            "<membership>\n<principal scope=\"GROUP\" namespace=\"Default\">eng</principal>\n\
             <members>\n<principal scope=\"USER\" \
             case-sensitivity-type=\"EVERYTHING_CASE_INSENSITIVE\">CORP\\alice</principal>\n\
             <principal scope=\"GROUP\">qa</principal>\n</members>\n</membership>\n"
        );
    }

    #[test]
    fn bad_members_are_refused_naming_the_field() {
        let err = |line: &str| encode(line).unwrap_err().to_string();
        assert!(
            err(r#"{"group": "g", "members": [{"name": "a", "scope": "role"}]}"#)
                .contains("field 'members': members[0]: scope 'role' is not user or group")
        );
        assert!(
            err(r#"{"group": "g", "members": [{"name": " ", "scope": "user"}]}"#)
                .contains("would be lost")
        );
        assert!(err(
            r#"{"group": "g", "members": [{"name": "a", "scope": "user", "access": "permit"}]}"#
        )
        .contains("no access"));
        assert!(err(r#"{"group": " ", "members": []}"#).contains("field 'group'"));
        assert!(err(r#"{"members": []}"#).contains("missing field 'group'"));
        assert!(err(r#"{"group": "g", "members": []}"#)
            .contains("field 'members': a group needs at least one member"));
        assert!(err(r#"{"group": "g"}"#).contains("field 'members'"));
        assert!(
            err(r#"{"group": "g", "members": [["a", "user", null, null, null, null]]}"#).contains(
                "field 'members': expected each principal as a JSON object, not an array"
            )
        );
    }
}
