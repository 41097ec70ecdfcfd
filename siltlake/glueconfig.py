"""`[publish.glue]`: the AWS Glue Data Catalog publish target's settings (siltlake.publish.glue)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator


class GlueTargetConfig(BaseModel):
    """Databases `<database_prefix><schema>` in the Glue Data Catalog of `catalog_id` (default: the account of
    the credentials) in `region`. Credentials come from boto3's usual chain (environment, profile, instance role)."""

    model_config = ConfigDict(extra="forbid")

    region: str | None = Field(
        default=None,
        description="AWS region of the Data Catalog; unset: AWS_REGION, AWS_DEFAULT_REGION or the profile's region",
    )
    endpoint_url: str | None = Field(
        default=None, description="another Glue endpoint (a VPC endpoint, a test server); unset: the region's"
    )
    catalog_id: str | None = Field(
        default=None,
        description="the AWS account id whose Data Catalog is written "
        "(another account's, shared through Lake Formation); unset: the credentials'",
    )
    database_prefix: str = ""
    max_attempts: int = Field(
        default=10, ge=1, description="attempts per Glue call (botocore's standard retries on throttling and 5xx)"
    )

    @field_validator("database_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        # Athena and Glue fold names to lower case; an upper-case prefix would name a database no query finds.
        if value and not re.fullmatch(r"[a-z_][a-z0-9_]{0,63}", value):
            raise ValueError(f"{value!r} must be empty or up to 64 characters of a-z, 0-9 and _")
        return value

    @field_validator("catalog_id")
    @classmethod
    def _catalog_id(cls, value: str | None) -> str | None:
        if value and not re.fullmatch(r"[0-9]{12}", value):
            raise ValueError(f"{value!r} is not an AWS account id (12 digits)")
        return value or None

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} must be an http:// or https:// URL")
        return value or None
