"""Fakes of the clouds' price APIs, on loopback HTTP servers that speak each API's real wire
protocol, so the real clients (boto3's `pricing`, plain HTTP GETs for GCP's catalog and
Azure's retail prices) talk to them:

- `aws_pricing.PriceListServer`: the AWS Price List API (`GetProducts`, JSON 1.1).
- `gcp_catalog.BillingCatalogServer`: the Cloud Billing Catalog API (`services.skus.list`
  of Compute Engine, `pageToken` paging, an API key or a bearer token).
- `azure_retail.RetailPricesServer`: Azure's Retail Prices API (`$filter`, `NextPageLink`).

EC2's spot price history is moto's (fakes/aws); `aws_spot.zone_prices` sets its per-zone
prices. Each server logs its calls (`calls`), can be taken offline (`offline = True`: every
call answers 503) or slow (`delay_s`).
"""
