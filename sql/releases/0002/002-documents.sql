-- Row-level security of the documents table: tenants see their own documents, service roles all.
SET LOCAL ROLE toolkit_owner;

DROP POLICY IF EXISTS tenant_isolation ON toolkit.documents;
CREATE POLICY tenant_isolation ON toolkit.documents
AS PERMISSIVE FOR ALL TO public
USING (tenant = (SELECT toolkit.current_tenant()))
WITH CHECK (tenant = (SELECT toolkit.current_tenant()));

DROP POLICY IF EXISTS service_access ON toolkit.documents;
CREATE POLICY service_access ON toolkit.documents
AS PERMISSIVE FOR ALL TO toolkit_writer, toolkit_owner
USING (TRUE)
WITH CHECK (TRUE);
