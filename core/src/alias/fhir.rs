//! Every FHIR resource type of R4 (4.0.1) and R5 (5.0.0).
//!
//! A reference `Type/id` to any of these is an id, whether or not the
//! taxonomy maps the type to a kind (unmapped types take the fallback kind):
//! an HMS that returns a resource type nobody configured must not leak it.
//! The exception is [`DEFINITION_TYPES`]: a terminology or conformance
//! definition (`CodeSystem/v3-ActCode`) is no record, unless the taxonomy
//! maps its type to a kind.

/// The resource type names, sorted (binary search).
pub const RESOURCE_TYPES: &[&str] = &[
    "Account",
    "ActivityDefinition",
    "ActorDefinition",
    "AdministrableProductDefinition",
    "AdverseEvent",
    "AllergyIntolerance",
    "Appointment",
    "AppointmentResponse",
    "ArtifactAssessment",
    "AuditEvent",
    "Basic",
    "Binary",
    "BiologicallyDerivedProduct",
    "BiologicallyDerivedProductDispense",
    "BodyStructure",
    "Bundle",
    "CanonicalResource",
    "CapabilityStatement",
    "CarePlan",
    "CareTeam",
    "CatalogEntry",
    "ChargeItem",
    "ChargeItemDefinition",
    "Citation",
    "Claim",
    "ClaimResponse",
    "ClinicalImpression",
    "ClinicalUseDefinition",
    "CodeSystem",
    "Communication",
    "CommunicationRequest",
    "CompartmentDefinition",
    "Composition",
    "ConceptMap",
    "Condition",
    "ConditionDefinition",
    "Consent",
    "Contract",
    "Coverage",
    "CoverageEligibilityRequest",
    "CoverageEligibilityResponse",
    "DetectedIssue",
    "Device",
    "DeviceAssociation",
    "DeviceDefinition",
    "DeviceDispense",
    "DeviceMetric",
    "DeviceRequest",
    "DeviceUsage",
    "DeviceUseStatement",
    "DiagnosticReport",
    "DocumentManifest",
    "DocumentReference",
    "DomainResource",
    "EffectEvidenceSynthesis",
    "Encounter",
    "EncounterHistory",
    "Endpoint",
    "EnrollmentRequest",
    "EnrollmentResponse",
    "EpisodeOfCare",
    "EventDefinition",
    "Evidence",
    "EvidenceReport",
    "EvidenceVariable",
    "ExampleScenario",
    "ExplanationOfBenefit",
    "FamilyMemberHistory",
    "Flag",
    "FormularyItem",
    "GenomicStudy",
    "Goal",
    "GraphDefinition",
    "Group",
    "GuidanceResponse",
    "HealthcareService",
    "ImagingSelection",
    "ImagingStudy",
    "Immunization",
    "ImmunizationEvaluation",
    "ImmunizationRecommendation",
    "ImplementationGuide",
    "Ingredient",
    "InsurancePlan",
    "InventoryItem",
    "InventoryReport",
    "Invoice",
    "Library",
    "Linkage",
    "List",
    "Location",
    "ManufacturedItemDefinition",
    "Measure",
    "MeasureReport",
    "Media",
    "Medication",
    "MedicationAdministration",
    "MedicationDispense",
    "MedicationKnowledge",
    "MedicationRequest",
    "MedicationStatement",
    "MedicinalProduct",
    "MedicinalProductAuthorization",
    "MedicinalProductContraindication",
    "MedicinalProductDefinition",
    "MedicinalProductIndication",
    "MedicinalProductIngredient",
    "MedicinalProductInteraction",
    "MedicinalProductManufactured",
    "MedicinalProductPackaged",
    "MedicinalProductPharmaceutical",
    "MedicinalProductUndesirableEffect",
    "MessageDefinition",
    "MessageHeader",
    "MetadataResource",
    "MolecularSequence",
    "NamingSystem",
    "NutritionIntake",
    "NutritionOrder",
    "NutritionProduct",
    "Observation",
    "ObservationDefinition",
    "OperationDefinition",
    "OperationOutcome",
    "Organization",
    "OrganizationAffiliation",
    "PackagedProductDefinition",
    "Parameters",
    "Patient",
    "PaymentNotice",
    "PaymentReconciliation",
    "Permission",
    "Person",
    "PlanDefinition",
    "Practitioner",
    "PractitionerRole",
    "Procedure",
    "Provenance",
    "Questionnaire",
    "QuestionnaireResponse",
    "RegulatedAuthorization",
    "RelatedPerson",
    "RequestGroup",
    "RequestOrchestration",
    "Requirements",
    "ResearchDefinition",
    "ResearchElementDefinition",
    "ResearchStudy",
    "ResearchSubject",
    "Resource",
    "RiskAssessment",
    "RiskEvidenceSynthesis",
    "Schedule",
    "SearchParameter",
    "ServiceRequest",
    "Slot",
    "Specimen",
    "SpecimenDefinition",
    "StructureDefinition",
    "StructureMap",
    "Subscription",
    "SubscriptionStatus",
    "SubscriptionTopic",
    "Substance",
    "SubstanceDefinition",
    "SubstanceNucleicAcid",
    "SubstancePolymer",
    "SubstanceProtein",
    "SubstanceReferenceInformation",
    "SubstanceSourceMaterial",
    "SubstanceSpecification",
    "SupplyDelivery",
    "SupplyRequest",
    "Task",
    "TerminologyCapabilities",
    "TestPlan",
    "TestReport",
    "TestScript",
    "Transport",
    "ValueSet",
    "VerificationResult",
    "VisionPrescription",
];

/// Whether `name` is a FHIR R4 or R5 resource type.
pub fn is_resource_type(name: impl AsRef<[u8]>) -> bool {
    let name = name.as_ref();
    // Every type name starts upper case: most words are rejected unsearched.
    name.first().is_some_and(u8::is_ascii_uppercase)
        && RESOURCE_TYPES
            .binary_search_by(|t| t.as_bytes().cmp(name))
            .is_ok()
}

/// The canonical resource types of FHIR's terminology and conformance
/// modules, sorted: a reference to one in text names a definition shared
/// across servers (`http://terminology.hl7.org/CodeSystem/v3-ActCode`, the
/// system of every `Encounter.class`), not a record. Unless the taxonomy maps
/// the type to a kind, it is no record type (`Taxonomy::resource_type`), so
/// its references are not ids.
pub const DEFINITION_TYPES: &[&str] = &[
    "CapabilityStatement",
    "CodeSystem",
    "CompartmentDefinition",
    "ConceptMap",
    "ExampleScenario",
    "GraphDefinition",
    "ImplementationGuide",
    "MessageDefinition",
    "NamingSystem",
    "OperationDefinition",
    "SearchParameter",
    "StructureDefinition",
    "StructureMap",
    "TerminologyCapabilities",
    "ValueSet",
];

/// Whether `name` is one of [`DEFINITION_TYPES`].
pub fn is_definition_type(name: impl AsRef<[u8]>) -> bool {
    let name = name.as_ref();
    DEFINITION_TYPES
        .binary_search_by(|t| t.as_bytes().cmp(name))
        .is_ok()
}

/// Whether a JSON key is a FHIR (R4 or R5) `…Id` element that names no
/// record anywhere: `linkId` and its kin link items of one resource
/// (Questionnaire and QuestionnaireResponse `item.linkId`, R5 Measure
/// `group.linkId` and `group.stratifier.component.linkId`, R5 PlanDefinition
/// and RequestOrchestration `action.linkId`, R5 ResearchStudy
/// `comparisonGroup.linkId`, Contract `term.offer.linkId`,
/// `term.asset.linkId`, `term.asset.valuedItem.linkId`, `term.action.linkId`,
/// and Contract's `contextLinkId`, `requesterLinkId`, `performerLinkId`,
/// `reasonLinkId`). Their values (`"1"`, `"1.1.2"`, `"3.2.1.1.1.1"`) are labels.
pub fn is_link_id_key(key: &str) -> bool {
    key == "linkId" || key.ends_with("LinkId")
}

/// FHIR `…Id` elements (R4 and R5) that name something inside a resource,
/// a package or a test run, not a record: read as such only inside a FHIR
/// resource (an HMS's own `sourceId` may well be a record's id).
/// - `TestScript` `variable.sourceId`, `setup.action.operation.sourceId`,
///   `.targetId`, `.requestId`, `.responseId`, `setup.action.assert.sourceId`,
///   `.compareToSourceId`, `.validateProfileId`;
/// - R5 `GraphDefinition` `node.nodeId`, `link.sourceId`, `link.targetId`;
/// - R5 `PlanDefinition` / `RequestOrchestration` `action.relatedAction.targetId`,
///   R4 `PlanDefinition` / `RequestGroup` `action.relatedAction.actionId`,
///   `PlanDefinition.action.goalId`;
/// - R4 `ExampleScenario` `actor.actorId`;
/// - `ImplementationGuide.packageId`, `dependsOn.packageId`,
///   `definition.resource.groupingId`;
/// - `Meta.versionId` (a version counter).
const IN_RESOURCE_NON_RECORD_IDS: &[&str] = &[
    "actionId",
    "actorId",
    "compareToSourceId",
    "goalId",
    "groupingId",
    "nodeId",
    "packageId",
    "requestId",
    "responseId",
    "sourceId",
    "targetId",
    "validateProfileId",
    "versionId",
];

/// Whether `key` names no record when it stands inside a FHIR resource
/// ([`IN_RESOURCE_NON_RECORD_IDS`]), or anywhere ([`is_link_id_key`]).
pub fn is_non_record_id_key(key: &str, in_resource: bool) -> bool {
    is_link_id_key(key) || (in_resource && IN_RESOURCE_NON_RECORD_IDS.contains(&key))
}

/// Keys whose values are clinical content, never an id's position: a
/// coding's `system`, `code`, `display` and `version`, a quantity's `unit`,
/// a HumanName's `family`, `given`, `prefix`, `suffix`, a `name`, a
/// Reference's `display`. Nothing in them is replaced: a raw id there makes
/// the body withheld (verification reads them), never a changed value.
const CLINICAL_VALUE_KEYS: &[&str] = &[
    "code", "display", "family", "given", "name", "prefix", "suffix", "system", "unit", "version",
];

/// Whether the values under `key` are clinical content ([`CLINICAL_VALUE_KEYS`]).
pub fn is_clinical_value_key(key: &str) -> bool {
    CLINICAL_VALUE_KEYS.contains(&key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definition_types_are_sorted_resource_types() {
        assert!(DEFINITION_TYPES.windows(2).all(|w| w[0] < w[1]));
        assert!(DEFINITION_TYPES.iter().all(is_resource_type));
        assert!(is_definition_type("CodeSystem") && is_definition_type("ValueSet"));
        for t in [
            "Patient",
            "Encounter",
            "Questionnaire",
            "PlanDefinition",
            "codesystem",
        ] {
            assert!(!is_definition_type(t), "{t}");
        }
    }

    #[test]
    fn sorted_and_complete_enough() {
        assert!(RESOURCE_TYPES.windows(2).all(|w| w[0] < w[1]));
        assert!(RESOURCE_TYPES
            .iter()
            .all(|t| t.as_bytes()[0].is_ascii_uppercase()));
        assert!(RESOURCE_TYPES.len() >= 150);
        for t in [
            "Patient",
            "Observation",
            "DocumentReference",
            "Transport",
            "Media",
        ] {
            assert!(is_resource_type(t), "{t}");
        }
        assert!(!is_resource_type("Team"));
    }
}
