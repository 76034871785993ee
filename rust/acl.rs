//! Principals and per-URL ACLs, and their XML in the two dialects of the protocol: the gsafeed
//! DTD spells enumerations in lower case (`user`, `everything-case-sensitive`), the groups feed
//! DTD in upper case (`USER`, `EVERYTHING_CASE_SENSITIVE`).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::escape::{attr, escape_into, first_unrepresentable, Context};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    User,
    Group,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Permit,
    Deny,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inheritance {
    ChildOverrides,
    ParentOverrides,
    AndBothPermit,
    LeafNode,
}

impl Scope {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "user" => Ok(Scope::User),
            "group" => Ok(Scope::Group),
            _ => Err(format!("scope '{s}' is not user or group")),
        }
    }
}

impl Access {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "permit" => Ok(Access::Permit),
            "deny" => Ok(Access::Deny),
            _ => Err(format!("access '{s}' is not permit or deny")),
        }
    }
}

impl Inheritance {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "child-overrides" => Ok(Inheritance::ChildOverrides),
            "parent-overrides" => Ok(Inheritance::ParentOverrides),
            "and-both-permit" => Ok(Inheritance::AndBothPermit),
            "leaf-node" => Ok(Inheritance::LeafNode),
            _ => Err(format!(
                "inheritance_type '{s}' is not one of child-overrides, parent-overrides, \
                 and-both-permit, leaf-node"
            )),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Inheritance::ChildOverrides => "child-overrides",
            Inheritance::ParentOverrides => "parent-overrides",
            Inheritance::AndBothPermit => "and-both-permit",
            Inheritance::LeafNode => "leaf-node",
        }
    }
}

/// `principal_type`: the only value the protocol knows.
pub fn parse_principal_type(s: &str) -> Result<bool, String> {
    match s {
        "unqualified" => Ok(true),
        _ => Err(format!("principal_type '{s}' is not unqualified")),
    }
}

/// Which DTD a principal is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Feed,
    Groups,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub scope: Scope,
    /// Required in ACLs; absent in groups feeds, which list members.
    pub access: Option<Access>,
    pub namespace: Option<String>,
    pub case_sensitive: Option<bool>,
    /// `principal-type="unqualified"` (SharePoint local groups).
    pub unqualified: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acl {
    pub principals: Vec<Principal>,
    pub inheritance: Option<Inheritance>,
    pub inherit_from: Option<String>,
}

/// Refuses what XML cannot carry in a principal, which has no base64 form.
fn representable(what: &str, value: &str) -> Result<(), String> {
    match first_unrepresentable(value) {
        None => Ok(()),
        Some(at) => Err(format!(
            "{what} holds U+{:04X}, a character XML cannot carry",
            u32::from(value[at..].chars().next().unwrap_or_default())
        )),
    }
}

impl Principal {
    /// Refuses what the appliance would lose or XML cannot carry. Callers checking a list say
    /// which principal the message is about.
    pub fn check(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err(
                "the name is empty or white space, which the appliance skips: the \
                        principal would be lost"
                    .into(),
            );
        }
        if self.name.trim() != self.name {
            return Err(format!(
                "'{}' has leading or trailing white space, which the appliance strips",
                self.name
            ));
        }
        representable("the name", &self.name)?;
        if let Some(ns) = &self.namespace {
            if ns.is_empty() {
                return Err("the namespace is empty".into());
            }
            representable("the namespace", ns)?;
        }
        Ok(())
    }

    pub fn write(&self, out: &mut Vec<u8>, dialect: Dialect) {
        let upper = dialect == Dialect::Groups;
        out.extend_from_slice(b"<principal scope=\"");
        out.extend_from_slice(match (self.scope, upper) {
            (Scope::User, false) => b"user",
            (Scope::Group, false) => b"group",
            (Scope::User, true) => b"USER",
            (Scope::Group, true) => b"GROUP",
        });
        out.push(b'"');
        if let Some(access) = self.access {
            out.extend_from_slice(match access {
                Access::Permit => b" access=\"permit\"",
                Access::Deny => b" access=\"deny\"",
            });
        }
        if let Some(ns) = &self.namespace {
            attr(out, "namespace", ns);
        }
        if let Some(sensitive) = self.case_sensitive {
            out.extend_from_slice(b" case-sensitivity-type=\"");
            out.extend_from_slice(match (sensitive, upper) {
                (true, false) => b"everything-case-sensitive",
                (false, false) => b"everything-case-insensitive",
                (true, true) => b"EVERYTHING_CASE_SENSITIVE",
                (false, true) => b"EVERYTHING_CASE_INSENSITIVE",
            });
            out.push(b'"');
        }
        if self.unqualified {
            out.extend_from_slice(b" principal-type=\"unqualified\"");
        }
        out.push(b'>');
        escape_into(out, &self.name, Context::Text).expect("checked as representable");
        out.extend_from_slice(b"</principal>\n");
    }
}

/// The meta names of the guide's Legacy Metadata Format, which `fastfeed validate` and the
/// emulator read through the bindings (exact names, base64-encoded ones decoded first).
const LEGACY_USERS: &str = "google:aclusers";
const LEGACY_GROUPS: &str = "google:aclgroups";
const LEGACY_DENY_USERS: &str = "google:acldenyusers";
const LEGACY_DENY_GROUPS: &str = "google:acldenygroups";
pub const LEGACY_INHERITANCE: &str = "google:aclinheritancetype";
pub const LEGACY_INHERIT_FROM: &str = "google:aclinheritfrom";
/// The legacy meta names that give principals, each with the scope and access it gives.
pub const LEGACY_PRINCIPALS: [(&str, &str, &str); 4] = [
    (LEGACY_USERS, "user", "permit"),
    (LEGACY_GROUPS, "group", "permit"),
    (LEGACY_DENY_USERS, "user", "deny"),
    (LEGACY_DENY_GROUPS, "group", "deny"),
];

/// Whether a meta name gives its record a legacy ACL.
pub fn is_legacy_acl_name(name: &str) -> bool {
    [
        LEGACY_USERS,
        LEGACY_GROUPS,
        LEGACY_DENY_USERS,
        LEGACY_DENY_GROUPS,
        LEGACY_INHERITANCE,
        LEGACY_INHERIT_FROM,
    ]
    .contains(&name)
}

/// The guide's Legacy Metadata Format, of google:aclusers only: "If a content string ends in
/// =owner, =peeker, =reader, or =writer, that suffix is stripped from the user name.
/// Furthermore, if a content string ends in =peeker, that ACL entry is ignored." A user name
/// ending so would reach the index changed.
const LEGACY_ROLE_SUFFIXES: [&str; 4] = ["=owner", "=peeker", "=reader", "=writer"];
/// The role suffix whose entry the appliance ignores (see `LEGACY_ROLE_SUFFIXES`).
pub const LEGACY_IGNORED_ROLE: &str = "=peeker";

/// The role suffix the appliance strips from the content of legacy ACL meta `name`, once, if
/// it strips one: the writer refuses such a user name, `fastfeed validate` warns of it and the
/// emulator strips it, as the appliance does.
pub fn legacy_role(name: &str, content: &str) -> Option<&'static str> {
    // Only google:aclusers names lose a role suffix: the guide says so of no other.
    if name != LEGACY_USERS {
        return None;
    }
    LEGACY_ROLE_SUFFIXES
        .into_iter()
        .find(|suffix| content.ends_with(suffix))
}

impl Acl {
    pub fn check(&self) -> Result<(), String> {
        for (i, p) in self.principals.iter().enumerate() {
            p.check().map_err(|m| format!("principals[{i}]: {m}"))?;
        }
        if let Some(from) = &self.inherit_from {
            representable("inherit_from", from)?;
            crate::url::check_url(from).map_err(|m| format!("inherit_from: {m}"))?;
        }
        Ok(())
    }

    /// Writes `<acl>`; `url` is given for an ACL standing alone in a group, and must not be for
    /// one inside a record.
    pub fn write(&self, out: &mut Vec<u8>, url: Option<&str>) {
        out.extend_from_slice(b"<acl");
        if let Some(url) = url {
            attr(out, "url", url);
        }
        if let Some(inheritance) = self.inheritance {
            attr(out, "inheritance-type", inheritance.as_str());
        }
        if let Some(from) = &self.inherit_from {
            attr(out, "inherit-from", from);
        }
        if self.principals.is_empty() {
            out.extend_from_slice(b"/>\n");
            return;
        }
        out.extend_from_slice(b">\n");
        for p in &self.principals {
            p.write(out, Dialect::Feed);
        }
        out.extend_from_slice(b"</acl>\n");
    }

    /// The ACL as the legacy meta names of appliances before 7.0, which know neither
    /// namespaces nor case sensitivity: refused rather than dropped.
    pub fn legacy_metadata(&self) -> Result<Vec<(String, String)>, String> {
        let mut metas = Vec::with_capacity(self.principals.len() + 2);
        for (i, p) in self.principals.iter().enumerate() {
            if p.namespace.is_some() || p.case_sensitive.is_some() || p.unqualified {
                return Err(format!(
                    "principals[{i}]: the legacy ACL format has no namespace, case sensitivity \
                     or principal type; use --acl-format per-url"
                ));
            }
            let name = match (p.scope, p.access) {
                (Scope::User, Some(Access::Deny)) => LEGACY_DENY_USERS,
                (Scope::Group, Some(Access::Deny)) => LEGACY_DENY_GROUPS,
                (Scope::User, _) => LEGACY_USERS,
                (Scope::Group, _) => LEGACY_GROUPS,
            };
            if let Some(suffix) = legacy_role(name, &p.name) {
                return Err(format!(
                    "principals[{i}]: '{}' ends in '{suffix}', which the appliance strips from a \
                     legacy ACL user name (and drops the entry for =peeker); use --acl-format \
                     per-url",
                    p.name
                ));
            }
            metas.push((name.to_owned(), p.name.clone()));
        }
        if let Some(inheritance) = self.inheritance {
            metas.push((LEGACY_INHERITANCE.into(), inheritance.as_str().into()));
        }
        if let Some(from) = &self.inherit_from {
            metas.push((LEGACY_INHERIT_FROM.into(), from.clone()));
        }
        Ok(metas)
    }
}

/// A principal as given in JSON Lines or a Python dict, before its values are checked.
/// The enumerations are borrowed from the input: a groups feed parses millions of them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct PrincipalInput<'a> {
    pub name: String,
    #[serde(borrow)]
    pub scope: Cow<'a, str>,
    #[serde(borrow)]
    pub access: Option<Cow<'a, str>>,
    pub namespace: Option<String>,
    pub case_sensitive: Option<bool>,
    #[serde(borrow)]
    pub principal_type: Option<Cow<'a, str>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for PrincipalInput<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        PrincipalInput::deserialize(ObjectOnly(deserializer, "each principal"))
    }
}

impl PrincipalInput<'_> {
    /// Parses the enumerations (the values are checked with the record, see `Principal::check`);
    /// `what` names it in messages; `dialect` says whether `access` is required (ACLs) or
    /// meaningless (groups feed members).
    pub fn into_principal(self, what: &str, dialect: Dialect) -> Result<Principal, String> {
        let scope = Scope::parse(&self.scope).map_err(|m| format!("{what}: {m}"))?;
        let access = match (self.access, dialect) {
            (Some(a), Dialect::Feed) => {
                Some(Access::parse(&a).map_err(|m| format!("{what}: {m}"))?)
            }
            (None, Dialect::Feed) => {
                return Err(format!("{what}: access (permit or deny) is required"))
            }
            (Some(_), Dialect::Groups) => {
                return Err(format!(
                    "{what}: a group member has no access, only an ACL entry does"
                ))
            }
            (None, Dialect::Groups) => None,
        };
        let unqualified = match self.principal_type {
            Some(t) => parse_principal_type(&t).map_err(|m| format!("{what}: {m}"))?,
            None => false,
        };
        Ok(Principal {
            name: self.name,
            scope,
            access,
            namespace: self.namespace,
            case_sensitive: self.case_sensitive,
            unqualified,
        })
    }
}

/// An ACL as given, before its values are checked.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct AclInput<'a> {
    #[serde(default, borrow)]
    pub principals: Vec<PrincipalInput<'a>>,
    pub inheritance_type: Option<String>,
    pub inherit_from: Option<String>,
    /// Never allowed: read only to refuse it with a message that says why.
    pub url: Option<String>,
}

impl<'de: 'a, 'a> Deserialize<'de> for AclInput<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        AclInput::deserialize(ObjectOnly(deserializer, "the acl"))
    }
}

/// A deserializer that gives a struct (`.1` names it in the message) from an object only:
/// serde's derived structs take an array too, field by field (`["alice", "user"]` for a
/// principal), which the JSON Lines reader refuses for a record, and so refuses within one.
struct ObjectOnly<D>(D, &'static str);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ObjectOnly<D> {
    type Error = D::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0
            .deserialize_struct(name, fields, Object(visitor, self.1))
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The visitor of `ObjectOnly`: `visitor`'s, without its arrays.
struct Object<V>(V, &'static str);

impl<'de, V: Visitor<'de>> Visitor<'de> for Object<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(map)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<V::Value, A::Error> {
        Err(de::Error::custom(format!(
            "expected {} as a JSON object, not an array",
            self.1
        )))
    }
}

impl AclInput<'_> {
    pub fn into_acl(self) -> Result<Acl, String> {
        if self.url.is_some() {
            return Err(
                "an ACL inside a record is the record's own and takes no url; for another \
                        URL give a standalone ACL: {\"kind\": \"acl\", \"url\": ..., \"acl\": ...}"
                    .into(),
            );
        }
        let principals = self
            .principals
            .into_iter()
            .enumerate()
            .map(|(i, p)| p.into_principal(&format!("principals[{i}]"), Dialect::Feed))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Acl {
            principals,
            inheritance: self
                .inheritance_type
                .as_deref()
                .map(Inheritance::parse)
                .transpose()?,
            inherit_from: self.inherit_from,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Principal {
        Principal {
            name: "CORP\\alice & bob".into(),
            scope: Scope::User,
            access: Some(Access::Permit),
            namespace: Some("Default".into()),
            case_sensitive: Some(false),
            unqualified: false,
        }
    }

    #[test]
    fn the_two_dialects_spell_enumerations_differently() {
        let mut feed = Vec::new();
        alice().write(&mut feed, Dialect::Feed);
        assert_eq!(
            String::from_utf8(feed).unwrap(),
            "<principal scope=\"user\" access=\"permit\" namespace=\"Default\" \
             case-sensitivity-type=\"everything-case-insensitive\">CORP\\alice &amp; bob</principal>\n"
        );
        let mut groups = Vec::new();
        Principal {
            access: None,
            ..alice()
        }
        .write(&mut groups, Dialect::Groups);
        assert_eq!(
            String::from_utf8(groups).unwrap(),
            "<principal scope=\"USER\" namespace=\"Default\" \
             case-sensitivity-type=\"EVERYTHING_CASE_INSENSITIVE\">CORP\\alice &amp; bob</principal>\n"
        );
    }

    #[test]
    fn names_the_appliance_would_strip_or_skip_are_refused() {
        for (name, words) in [
            (" ", "white space"),
            (" x", "leading or trailing"),
            ("a\u{1}", "U+0001"),
        ] {
            let p = Principal {
                name: name.into(),
                ..alice()
            };
            assert!(p.check().unwrap_err().contains(words), "{name:?}");
        }
    }

    #[test]
    fn legacy_metadata_maps_scope_and_access_and_refuses_namespaces() {
        let acl = Acl {
            principals: vec![
                Principal {
                    namespace: None,
                    case_sensitive: None,
                    ..alice()
                },
                Principal {
                    name: "eng".into(),
                    scope: Scope::Group,
                    access: Some(Access::Deny),
                    namespace: None,
                    case_sensitive: None,
                    unqualified: false,
                },
            ],
            inheritance: Some(Inheritance::ChildOverrides),
            inherit_from: Some("http://share.example.com/".into()),
        };
        assert_eq!(
            acl.legacy_metadata().unwrap(),
            [
                ("google:aclusers".to_owned(), "CORP\\alice & bob".to_owned()),
                ("google:acldenygroups".into(), "eng".into()),
                ("google:aclinheritancetype".into(), "child-overrides".into()),
                (
                    "google:aclinheritfrom".into(),
                    "http://share.example.com/".into()
                ),
            ]
        );
        let namespaced = Acl {
            principals: vec![alice()],
            ..Acl::default()
        };
        assert!(namespaced
            .legacy_metadata()
            .unwrap_err()
            .contains("legacy ACL format"));
        for name in ["joe=owner", "joe=peeker", "joe=reader", "joe=writer"] {
            let role = Acl {
                principals: vec![Principal {
                    name: name.into(),
                    namespace: None,
                    case_sensitive: None,
                    ..alice()
                }],
                ..Acl::default()
            };
            assert!(
                role.legacy_metadata().unwrap_err().contains("strips"),
                "{name}"
            );
        }
        // The guide strips the suffix from permitted user names only (google:aclusers).
        let kept = Acl {
            principals: vec![
                Principal {
                    name: "eng=reader".into(),
                    scope: Scope::Group,
                    access: Some(Access::Permit),
                    namespace: None,
                    case_sensitive: None,
                    unqualified: false,
                },
                Principal {
                    name: "joe=owner".into(),
                    scope: Scope::User,
                    access: Some(Access::Deny),
                    namespace: None,
                    case_sensitive: None,
                    unqualified: false,
                },
            ],
            ..Acl::default()
        };
        assert_eq!(
            kept.legacy_metadata().unwrap(),
            [
                ("google:aclgroups".to_owned(), "eng=reader".to_owned()),
                ("google:acldenyusers".into(), "joe=owner".into()),
            ]
        );
    }

    #[test]
    fn a_principal_or_an_acl_given_as_an_array_is_refused() {
        let refused = |text: &str| {
            serde_json::from_str::<AclInput>(text)
                .unwrap_err()
                .to_string()
        };
        assert!(
            refused(r#"{"principals": [["bob", "user", "permit", null, null, null]]}"#)
                .starts_with("expected each principal as a JSON object, not an array")
        );
        assert!(refused(r#"[[], null, null, null]"#)
            .starts_with("expected the acl as a JSON object, not an array"));
        let acl: AclInput =
            serde_json::from_str(r#"{"principals": [{"name": "bob", "scope": "user"}]}"#).unwrap();
        assert_eq!(acl.principals[0].name, "bob");
    }
}
